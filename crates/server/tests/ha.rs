//! The pieces of high availability one machine proves without a cluster:
//! `keel probe` (the monitor's NFS call), the `[ha]` checks that keep both
//! nodes handing out the same file handles, and the OCF resource agent
//! driven by resource-agents' own `ocf-tester` and by hand (a frozen
//! server must fail its monitor, a stop must end it).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use keel_testkit::disk::XfsDisk;
use keel_testkit::procs::run_timeout;
use keel_testkit::server::{ExportOpts, TestServer, keel_bin, require_root};

const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// Held by tests that power-cut a disk and by tests that make mount
/// namespaces (`ip netns exec`): a namespace made meanwhile keeps a copy
/// of the cut file system's mount, so its superblock, shut down, outlives
/// the unmount and comes back at the remount (EIO everywhere).
static MOUNTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
const AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/ocf/keel");

fn keel(args: &[&str]) -> keel_testkit::procs::Output {
    run_timeout(Command::new(keel_bin()).args(args), CMD_TIMEOUT)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn probe_answers_for_a_serving_server_and_names_what_is_silent() {
    let mut server = TestServer::start_default("probe");
    let addr = server.addr.to_string();
    let out = keel(&["probe", "--address", &addr]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("NFS v3 answers") && out.stdout.contains("MOUNT v3 answers"), "{out:?}");
    let by_config = keel(&["probe", "--config", server.config.to_str().unwrap()]);
    assert!(by_config.status.success(), "{by_config:?}");

    // A frozen server: the kernel accepts the connection, nothing answers.
    let pid = server.pid().to_string();
    run_timeout(Command::new("kill").args(["-STOP", &pid]), CMD_TIMEOUT);
    let started = Instant::now();
    let frozen = keel(&["probe", "--address", &addr, "--timeout", "1"]);
    run_timeout(Command::new("kill").args(["-CONT", &pid]), CMD_TIMEOUT);
    assert_eq!(frozen.status.code(), Some(1), "{frozen:?}");
    assert!(frozen.stderr.contains(&format!("{addr}: NFS v3 NULL")), "{frozen:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "the probe is bounded by its timeout");

    server.terminate();
    let gone = keel(&["probe", "--address", &addr]);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    assert!(gone.stderr.contains("refused"), "{gone:?}");
    let bad = keel(&["probe", "--address", "nfs-server"]);
    assert!(bad.stderr.contains("\"nfs-server\" is not an address"), "{bad:?}");
    let none = keel(&["probe"]);
    assert_eq!(none.status.code(), Some(2), "clap names the missing argument: {none:?}");
}

/// A configuration with `[ha]` whose state and export are `state` and
/// `export`, listening on 127.0.0.1:`port`.
fn ha_config(dir: &Path, state: &Path, export: &Path, port: u16) -> PathBuf {
    std::fs::create_dir_all(export).unwrap();
    let text = format!(
        "[ha]\nenabled = true\n\n[server]\nlisten = [\"127.0.0.1:{port}\"]\nportmap = \"off\"\nstate_dir = \"{}\"\n\n\
         [[export]]\npath = \"{}\"\nid = 1\naccess = \"rw\"\nsquash = \"no_root_squash\"\n\
         clients = [{{ host = \"127.0.0.1\" }}]\n",
        state.display(),
        export.display()
    );
    let file = dir.join(format!("keel-ha-{port}.toml"));
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn ha_refuses_state_or_exports_that_would_not_move_with_the_service() {
    require_root();
    let disk = XfsDisk::new("ha-shared");
    let elsewhere = std::env::temp_dir().join(format!("keel-ha-local-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();

    let good = ha_config(&disk.mnt, &disk.mnt.join("state"), &disk.mnt.join("export"), free_port());
    let out = keel(&["check-config", good.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("[ha]: state_dir and every export on one file system"), "{out:?}");

    let split = ha_config(&disk.mnt, &disk.mnt.join("state"), &elsewhere.join("export"), free_port());
    let out = keel(&["check-config", split.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("is not on state_dir's file system"), "{out:?}");
    let out = keel(&["serve", "--config", split.to_str().unwrap()]);
    assert!(!out.status.success() && out.stderr.contains("is not on state_dir's file system"), "{out:?}");

    // State on the node's own root file system would not follow the service.
    let root_state = PathBuf::from(format!("/keel-ha-test-state-{}", std::process::id()));
    let local = ha_config(&disk.mnt, &root_state, &disk.mnt.join("export"), free_port());
    let out = keel(&["check-config", local.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&root_state);
    let _ = std::fs::remove_dir_all(&elsewhere);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("is on the root file system"), "{out:?}");
    // Every problem is listed, the export's with its line.
    let export_line = format!("{}:9: [ha] enabled but export", local.display());
    assert!(out.stderr.contains(&export_line), "{export_line:?} not in {out:?}");
}

/// A reload runs the checks of a start, and cannot switch `[ha]` off: a
/// file that turns it off to make an export async, or that adds an export
/// on the node's own disk, is refused and changes nothing.
#[test]
fn a_reload_cannot_switch_ha_off_or_add_what_a_start_refuses() {
    require_root();
    let disk = XfsDisk::new("ha-reload");
    let elsewhere = std::env::temp_dir().join(format!("keel-ha-reload-local-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    let port = free_port();
    let config = ha_config(&disk.mnt, &disk.mnt.join("state"), &disk.mnt.join("export"), port);
    let config_arg = config.to_str().unwrap();
    let good = std::fs::read_to_string(&config).unwrap();
    // Killed on drop, also when an assertion fails.
    let _server = Served::start(&config, port);
    let exports_before = keel(&["exports", "--config", config_arg]).stdout;
    assert!(exports_before.contains("(rw,sync,"), "{exports_before}");

    let cases = [
        (
            good.replace("enabled = true", "enabled = false")
                .replace("access = \"rw\"", "access = \"rw\"\nsync = false"),
            "[ha] changes only at a restart",
        ),
        (
            format!(
                "{good}\n[[export]]\npath = \"{}\"\nid = 2\nfsid = 2\nclients = [{{ host = \"127.0.0.1\" }}]\n",
                elsewhere.display()
            ),
            "is not on state_dir's file system",
        ),
    ];
    for (text, why) in cases {
        std::fs::write(&config, &text).unwrap();
        let out = keel(&["exports", "reload", "--config", config_arg]);
        assert_eq!(out.status.code(), Some(1), "a reload bypassed [ha]:\n{text}\n{out:?}");
        assert!(out.stderr.contains(why), "{why:?} not in {out:?}");
        assert_eq!(keel(&["exports", "--config", config_arg]).stdout, exports_before, "the exports changed");
        if why.starts_with("is not") {
            // check-config says what the reload said.
            let check = keel(&["check-config", config_arg]);
            assert!(!check.status.success() && check.stderr.contains(why), "{check:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&elsewhere);
}

/// `keel ha init --out DIR/` names its files once each (`DIR/authkey`,
/// not `DIR//authkey`), and `keel ha status` says why crm_mon failed
/// without an empty ": ;" when crm_mon printed nothing.
#[test]
fn ha_commands_name_paths_and_failures_plainly() {
    let dir = std::env::temp_dir().join(format!("keel-ha-words-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mount = dir.join("mount");
    std::fs::create_dir_all(&mount).unwrap();
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/ha/keel-ha.example.toml"));
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        example.unwrap().replace("mount = \"/srv/home\"", &format!("mount = {:?}", mount.display().to_string())),
    )
    .unwrap();
    let out_dir = format!("{}/", dir.join("out").display());
    let out = keel(&["ha", "init", plan.to_str().unwrap(), "--out", &out_dir]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains(&format!("corosync-keygen -k {out_dir}authkey")), "{out:?}");
    assert!(!out.stdout.contains("//"), "a doubled slash: {}", out.stdout);

    // A crm_mon that fails saying nothing (as it does with --output-as=xml).
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("crm_mon"), "#!/bin/sh\nexit 102\n").unwrap();
    std::fs::set_permissions(bin.join("crm_mon"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let status = run_timeout(Command::new(keel_bin()).args(["ha", "status"]).env("PATH", path), CMD_TIMEOUT);
    assert_eq!(status.status.code(), Some(3), "{status:?}");
    assert!(status.stderr.starts_with("keel: crm_mon failed (exit status: 102); is the cluster running"), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the agent as Pacemaker would: the action, parameters in the
/// environment.
fn agent(action: &str, env: &[(&str, String)], timeout_ms: u32) -> keel_testkit::procs::Output {
    run_timeout(&mut agent_command(Command::new(AGENT), action, "keel-test", env, timeout_ms), CMD_TIMEOUT)
}

/// `cmd` (the agent, or a command that runs it) given the agent's
/// action, resource instance and parameters as Pacemaker gives them.
fn agent_command(mut cmd: Command, action: &str, instance: &str, env: &[(&str, String)], timeout_ms: u32) -> Command {
    cmd.arg(action).env("OCF_ROOT", "/usr/lib/ocf").env("OCF_RESOURCE_INSTANCE", instance);
    cmd.env("OCF_RESKEY_CRM_meta_timeout", timeout_ms.to_string());
    for (k, v) in env {
        cmd.env(format!("OCF_RESKEY_{k}"), v);
    }
    cmd
}

/// Runs its closure when dropped: a failed assertion must not leave a
/// server the agent started running (it would hold the disk, and
/// whatever its parent held open).
struct StopAtEnd<F: Fn()>(F);

impl<F: Fn()> Drop for StopAtEnd<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

#[test]
fn the_ocf_agent_passes_ocf_tester_and_fails_a_frozen_server() {
    require_root();
    if !Path::new("/usr/sbin/ocf-tester").exists() {
        panic!("ocf-tester is missing: install resource-agents (scripts/test.sh does)");
    }
    let disk = XfsDisk::new("ha-ocf");
    let port = free_port();
    let config = ha_config(&disk.mnt, &disk.mnt.join("state"), &disk.mnt.join("export"), port);
    let run_dir = disk.mnt.join("..").join("run");
    let params = agent_params(&config, &run_dir);

    // resource-agents' own checks: meta-data against the DTD, monitor of
    // a stopped resource (7), start, monitor (0), start again, stop, stop
    // again.
    let mut tester = Command::new("/usr/sbin/ocf-tester");
    tester.args(["-n", "keel-test"]);
    for (k, v) in &params {
        tester.arg("-o").arg(format!("{k}={v}"));
    }
    tester.arg(AGENT);
    let out = run_timeout(&mut tester, Duration::from_secs(180));
    assert!(out.status.success() && out.stdout.contains("passed all tests"), "{out:?}");

    // By hand: started, it answers; frozen, the monitor fails within its
    // own short timeouts; stopped, it is gone and the monitor says so.
    let started = agent("start", &params, 30_000);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    assert_eq!(agent("monitor", &params, 20_000).status.code(), Some(0));
    let pid = std::fs::read_to_string(run_dir.join("keel-test.pid")).unwrap().trim().to_string();
    run_timeout(Command::new("kill").args(["-STOP", &pid]), CMD_TIMEOUT);
    let t = Instant::now();
    let frozen = agent("monitor", &params, 20_000);
    let frozen_took = t.elapsed();
    run_timeout(Command::new("kill").args(["-CONT", &pid]), CMD_TIMEOUT);
    assert_eq!(frozen.status.code(), Some(1), "{frozen:?}");
    assert!(frozen_took < Duration::from_secs(15), "failed in {frozen_took:?}, within the monitor's 20 s");
    assert_eq!(agent("monitor", &params, 20_000).status.code(), Some(0), "thawed, it answers again");

    // A server that does not drain (frozen again) is killed before the
    // stop's timeout (7 s: SIGKILL after 2), or Pacemaker would fence.
    run_timeout(Command::new("kill").args(["-STOP", &pid]), CMD_TIMEOUT);
    let t = Instant::now();
    let stopped = agent("stop", &params, 7_000);
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
    assert!(stopped.stderr.contains("killing it"), "{stopped:?}");
    assert!(t.elapsed() < Duration::from_secs(7), "the stop took {:?}", t.elapsed());
    // Gone, or a zombie left for whoever inherited it (the agent's shell
    // has exited): not running either way.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(state.is_empty() || state.contains(") Z "), "the server is gone after stop: {state}");
    assert_eq!(agent("monitor", &params, 20_000).status.code(), Some(7));
    // A start of a configuration keel refuses fails at validation, naming why.
    let mut broken = params.clone();
    let bad = disk.mnt.join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&config).unwrap().replace("access = \"rw\"", "access = \"rw\"\nsync = false"),
    )
    .unwrap();
    broken[0].1 = bad.display().to_string();
    let refused = agent("start", &broken, 20_000);
    assert_eq!(refused.status.code(), Some(6), "OCF_ERR_CONFIGURED: {refused:?}");
    assert_eq!(agent("monitor", &broken, 20_000).status.code(), Some(7));
    // A server that exits at start (its address is taken) fails the start
    // at once, with the server's own words; one still in exec does not
    // (the agent once took an empty /proc/PID/cmdline for an exit).
    let taken = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let t = Instant::now();
    let exited = agent("start", &params, 20_000);
    drop(taken);
    assert_eq!(exited.status.code(), Some(1), "OCF_ERR_GENERIC: {exited:?}");
    assert!(exited.stderr.contains("keel serve exited at start"), "{exited:?}");
    assert!(exited.stderr.to_lowercase().contains("address"), "the server's reason is passed on: {exited:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "failed in {:?}", t.elapsed());
    assert_eq!(agent("monitor", &params, 20_000).status.code(), Some(7));
    // A server that takes a while to become `keel serve` (here a wrapper
    // that sleeps first, under a command line without "serve --config")
    // is waited for, not taken for gone: the start loop's monitor once
    // overwrote the pid of the child it watched with the empty answer of
    // a lookup that failed, and the next turn found no such process.
    let wrapper = disk.mnt.join("..").join("keel-slow-exec");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ \"$1\" = serve ] || exec {keel} \"$@\"\n\
             KEEL_ARGS=\"$*\" exec sh -c 'sleep 1; exec {keel} $KEEL_ARGS'\n",
            keel = keel_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut slow = params.clone();
    slow[1].1 = wrapper.display().to_string();
    let started = agent("start", &slow, 30_000);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    assert_eq!(agent("monitor", &slow, 20_000).status.code(), Some(0));
    assert_eq!(agent("stop", &slow, 30_000).status.code(), Some(0));
    assert_eq!(agent("monitor", &slow, 20_000).status.code(), Some(7));
}

/// The OCF agent's parameters for the server of `config`, run from
/// `run_dir`.
fn agent_params(config: &Path, run_dir: &Path) -> [(&'static str, String); 4] {
    [
        ("config", config.display().to_string()),
        ("binary", keel_bin().display().to_string()),
        ("run_dir", run_dir.display().to_string()),
        ("log_dir", run_dir.display().to_string()),
    ]
}

/// A `crm_attribute` in `bin` that appends each call's arguments to
/// `bin/calls`, then runs `then` (shell); the file and a PATH that finds
/// it first.
fn logging_crm_attribute(bin: &Path, then: &str) -> (std::path::PathBuf, String) {
    let calls = bin.join("calls");
    let script = format!("#!/bin/sh\necho \"$*\" >>{}\n{then}\n", calls.display());
    std::fs::write(bin.join("crm_attribute"), script).unwrap();
    std::fs::set_permissions(bin.join("crm_attribute"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (calls, format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
}

/// A start writes nothing to the CIB: a write to its configuration aborts
/// the transition under way, and the floating address, which starts after
/// the server, waited for the controller to compute it again (and for the
/// writes themselves), a tenth of a second and more at every failover. A
/// monitor records the start instead (for `keel ha status`), here the first
/// (the server listens on an address this node holds): the holder before
/// this node, then this node with the start's time, once.
#[test]
fn a_start_writes_nothing_to_the_cib_and_the_first_monitor_records_it() {
    require_root();
    let disk = XfsDisk::new("ha-record");
    let port = free_port();
    let config = ha_config(&disk.mnt, &disk.mnt.join("state"), &disk.mnt.join("export"), port);
    let run_dir = disk.mnt.join("..").join("run-record");
    // crm_attribute as the agent finds it on the PATH: it logs each call,
    // and a query finds the node that served before.
    let bin = disk.mnt.join("..").join("bin-record");
    std::fs::create_dir_all(&bin).unwrap();
    let (calls, path) = logging_crm_attribute(&bin, "case \"$*\" in *--query*) echo 'keel-ha-a 1795825840' ;; esac");
    let params = agent_params(&config, &run_dir);
    let run = |action: &str, params: &[(&str, String)]| {
        let mut cmd = agent_command(Command::new(AGENT), action, "keel-record", params, 30_000);
        run_timeout(cmd.env("PATH", &path), CMD_TIMEOUT)
    };
    let logged = || std::fs::read_to_string(&calls).unwrap_or_default();
    let _stop = StopAtEnd(|| {
        run("stop", &params);
    });

    let started = run("start", &params);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    assert_eq!(logged(), "", "the start wrote to the CIB");
    assert_eq!(run("monitor", &params).status.code(), Some(0));
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let recorded = logged();
    let lines: Vec<&str> = recorded.lines().collect();
    assert_eq!(lines.len(), 3, "a query and two records: {recorded}");
    assert!(lines[0].contains("--name keel-keel-record-active --query"), "{recorded}");
    assert!(lines[1].contains("--name keel-keel-record-previous --update keel-ha-a 1795825840"), "{recorded}");
    assert!(lines[2].contains(&format!("--name keel-keel-record-active --update {node} ")), "{recorded}");
    assert_eq!(run("monitor", &params).status.code(), Some(0));
    assert_eq!(logged(), recorded, "recorded once, not at every monitor");
    assert_eq!(run("stop", &params).status.code(), Some(0));
    // A start stopped before its first monitor leaves nothing behind for
    // a later monitor to record.
    let started = run("start", &params);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    assert_eq!(run("stop", &params).status.code(), Some(0));
    assert_eq!(run("monitor", &params).status.code(), Some(7));
    assert_eq!(logged(), recorded, "a stopped server records nothing");
}

/// A start's record waits for the floating address. The group starts the
/// address after the server; when Pacemaker runs one action at a time (a
/// loaded node), the server's first monitor runs before the address's
/// start, and its write to the CIB aborted the transition, which the
/// controller computed again (transition-delay included) before it
/// started the address: 0.16 s more for the clients in the lab. A monitor
/// that finds the address not yet on this node passes and records
/// nothing; the first one that finds it records the start, once.
#[test]
fn the_start_is_recorded_once_the_floating_address_is_up() {
    require_root();
    // The address is a namespace's; `ip netns exec` copies mounts.
    let _mounts = MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let disk = XfsDisk::new("ha-record-ip");
    let ns = keel_testkit::netns::Netns::new("record-ip");
    let port = free_port();
    let config = ha_config(&disk.mnt, &disk.mnt.join("state"), &disk.mnt.join("export"), port);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(&format!("127.0.0.1:{port}"), &format!("10.78.0.100:{port}"))
            .replace("\"127.0.0.1\"", "\"10.78.0.0/24\""),
    )
    .unwrap();
    let run_dir = disk.mnt.join("..").join("run-record-ip");
    let bin = disk.mnt.join("..").join("bin-record-ip");
    std::fs::create_dir_all(&bin).unwrap();
    let (calls, path) = logging_crm_attribute(&bin, "");
    let params = agent_params(&config, &run_dir);
    // In the namespace's network only (nsenter), so the server started
    // there holds no copy of the test's mounts.
    let run = |action: &str| {
        let mut nsenter = Command::new("nsenter");
        nsenter.arg(format!("--net={}", ns.path().display())).arg(AGENT);
        let mut cmd = agent_command(nsenter, action, "keel-record-ip", &params, 30_000);
        run_timeout(cmd.env("PATH", &path), CMD_TIMEOUT)
    };
    let logged = || std::fs::read_to_string(&calls).unwrap_or_default();
    let _stop = StopAtEnd(|| {
        run("stop");
    });

    let started = run("start");
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    let early = run("monitor");
    assert_eq!(early.status.code(), Some(0), "the address not up yet is no failure: {early:?}");
    assert_eq!(logged(), "", "recorded before the floating address was up");
    // IPaddr2's start.
    ns.run_ok(&["ip", "addr", "add", "10.78.0.100/32", "dev", "lo"]);
    assert_eq!(run("monitor").status.code(), Some(0));
    let recorded = logged();
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    assert!(recorded.contains(&format!("--name keel-keel-record-ip-active --update {node} ")), "{recorded}");
    assert_eq!(run("monitor").status.code(), Some(0));
    assert_eq!(logged(), recorded, "recorded once");
}

/// The hosts and directories DUMP lists.
fn dump(server: &TestServer) -> Vec<(String, String)> {
    use keel_testkit::nfs::{RpcConn, prog};
    let mut conn = RpcConn::connect(server.addr).unwrap();
    let void = nfs3_types::xdr_codec::Void;
    let list: nfs3_types::mount::mountlist = conn.call(prog::MOUNT, prog::MOUNT_V3, 2, &void).unwrap();
    list.0
        .iter()
        .map(|m| {
            let host = String::from_utf8_lossy(m.ml_hostname.0.as_ref()).into_owned();
            (host, String::from_utf8_lossy(m.ml_directory.0.as_ref()).into_owned())
        })
        .collect()
}

/// mountd's rmtab: the mount list is in `state_dir`, so a restart (and a
/// failover, where state_dir is on the shared storage) keeps it.
#[test]
fn the_mount_list_outlives_a_restart_and_a_kill() {
    use keel_testkit::nfs::Nfs;
    let mut server = TestServer::start_default("mount-list");
    let path = server.export_path(1);
    Nfs::connect(server.addr).unwrap().mount(&path).unwrap();
    let listed = vec![("127.0.0.1".to_string(), path.clone())];
    assert_eq!(dump(&server), listed);
    server.kill9();
    server.start_again();
    assert_eq!(dump(&server), listed, "after kill -9");

    // UMNT takes it off, durably too.
    let mut conn = keel_testkit::nfs::RpcConn::connect(server.addr).unwrap();
    let dir = nfs3_types::mount::dirpath(nfs3_types::xdr_codec::Opaque::borrowed(path.as_bytes()));
    let _: nfs3_types::xdr_codec::Void = conn.call(100_005, 3, 3, &dir).unwrap();
    server.restart();
    assert_eq!(dump(&server), []);

    // A damaged file is reported and replaced, never fatal.
    std::fs::write(server.base.join("state/mount-list"), b"\x00\x00\x00\x01garbage").unwrap();
    server.restart();
    assert_eq!(dump(&server), []);
    assert!(server.log_text().contains("the mount list does not decode"), "{}", server.log_text());
}

/// The worker serving MNT may still act as the previous caller (workers
/// keep the last caller's file-system identity), while the mount list is
/// in root's state_dir: MNT after an ordinary user's call on the one worker
/// still saves the list.
#[test]
fn the_mount_list_is_saved_after_a_users_call_on_the_same_worker() {
    use keel_testkit::nfs::{Nfs, cred};
    let mut server = TestServer::start("mount-list-user", vec![ExportOpts::rw(1, "export")], "workers = 1");
    let path = server.export_path(1);
    std::fs::create_dir(server.export_dir(1).join("sub")).unwrap();
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&path).unwrap();
    nfs.conn.set_credential(cred(1000, 1000));
    nfs.create_new(&root, "users-file").unwrap();
    let owner = std::os::unix::fs::MetadataExt::uid(&keel_testkit::nfs::meta(&server.export_dir(1).join("users-file")));
    assert_eq!(owner, 1000, "the worker acted as the user");
    let sub = format!("{path}/sub");
    nfs.mount(&sub).unwrap();
    let listed = vec![("127.0.0.1".to_string(), path.clone()), ("127.0.0.1".to_string(), sub)];
    assert_eq!(dump(&server), listed);
    server.restart();
    assert_eq!(dump(&server), listed, "after a restart: {}", server.log_text());
}

/// `keel serve --config FILE`, killed on drop.
struct Served {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl Served {
    fn start(config: &Path, port: u16) -> Served {
        let log = std::fs::File::create(config.with_extension("log")).unwrap();
        let child = Command::new(keel_bin())
            .args(["serve", "--config", config.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !keel(&["probe", "--address", &addr.to_string(), "--timeout", "1"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "keel did not start: {}",
                std::fs::read_to_string(config.with_extension("log")).unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Served { child, addr }
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// RMDIR `name` with `xid` from a reserved port; the reply and the port.
async fn rmdir_once(addr: std::net::SocketAddr, root_fh: &[u8], name: &[u8], xid: u32) -> (Vec<u8>, Vec<u8>, u16) {
    use keel_testkit::nfs::*;
    use nfs3_types::nfs3::*;
    let fh = nfs_fh3 { data: nfs3_types::xdr_codec::Opaque::owned(root_fh.to_vec()) };
    let call = call_record(
        xid,
        NFS_PROGRAM::NFSPROC3_RMDIR,
        &keel_testkit::nfs::root(),
        &RMDIR3args { object: dirop(&fh, name) },
    );
    let mut raw = RawConn::connect_from(addr, 0, true).await;
    let port = raw.local_port();
    let reply = raw.call(&call).await;
    (call, reply, port)
}

/// The same call again from `port`, as a client retransmits after it
/// reconnects (Linux clients keep their source port).
async fn retransmit(addr: std::net::SocketAddr, port: u16, call: &[u8]) -> Vec<u8> {
    for _ in 0..50 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        if socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
            && let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(5), socket.connect(addr)).await
        {
            return keel_testkit::nfs::RawConn { stream: s }.call(call).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot reconnect from port {port}");
}

/// The failed node executed a RMDIR and its reply was lost with it: the
/// node that takes over (here: the same one after a power cut of the
/// shared file system) answers the retransmission with that reply, not
/// with NOENT. Without [ha] there is no journal, and the control shows it.
#[tokio::test(flavor = "multi_thread")]
// MOUNTS is held across the awaits on purpose: the other holder is a
// blocking test on another thread, not a task of this runtime.
#[allow(clippy::await_holding_lock)]
async fn a_retransmission_after_a_power_cut_gets_the_reply_the_failed_server_sent() {
    use keel_testkit::nfs::*;
    use nfs3_types::nfs3::*;
    require_root();
    let _mounts = MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
    for journaled in [true, false] {
        // A disk of its own per round: nothing carries over from the
        // first round's power cut.
        let mut disk = XfsDisk::new("ha-drc");
        let port = free_port();
        let export = disk.mnt.join("export");
        let file = ha_config(&disk.mnt.join(".."), &disk.mnt.join("state"), &export, port);
        if !journaled {
            let text = std::fs::read_to_string(&file).unwrap().replace("enabled = true", "enabled = false");
            std::fs::write(&file, text).unwrap();
        }
        let file = &file;
        std::fs::create_dir_all(export.join("gone")).unwrap();
        disk.syncfs();
        let server = Served::start(file, port);
        let root = Nfs::connect(server.addr).unwrap().mount(export.to_str().unwrap()).unwrap();
        let xid = 0x4a00_0001 + u32::from(journaled);
        let (call, first, client_port) = rmdir_once(server.addr, &root, b"gone", xid).await;
        assert_eq!(status(&decode_reply::<RMDIR3res>(xid, &first)), nfsstat3::NFS3_OK);

        server.kill9();
        disk.power_cut();
        disk.mount();
        assert!(!export.join("gone").exists(), "the RMDIR was durable (sync export)");
        let server = Served::start(file, port);
        let again = retransmit(server.addr, client_port, &call).await;
        let stat = status(&decode_reply::<RMDIR3res>(xid, &again));
        if journaled {
            assert_eq!(stat, nfsstat3::NFS3_OK, "the retransmission was answered from the journal");
            assert!(again == first, "the very reply the first server sent");
        } else {
            assert_eq!(stat, nfsstat3::NFS3ERR_NOENT, "control: without [ha] the call runs again");
        }
        server.kill9();
    }
}

/// Runs `argv` on the host, failing the test if it fails.
fn host(argv: &[&str]) {
    let out = run_timeout(Command::new(argv[0]).args(&argv[1..]), CMD_TIMEOUT);
    assert!(out.status.success(), "{argv:?}: {out:?}");
}

/// A node of the tickle test: a namespace whose veth is on the bridge,
/// holding the service address.
fn node(tag: &str, bridge: &str, veth: &str, service: &str) -> keel_testkit::netns::Netns {
    let ns = keel_testkit::netns::Netns::new(tag);
    let peer = format!("{veth}p");
    host(&["ip", "link", "add", veth, "type", "veth", "peer", "name", &peer]);
    host(&["ip", "link", "set", &peer, "master", bridge, "up"]);
    host(&["ip", "link", "set", veth, "netns", &ns.name]);
    ns.run_ok(&["ip", "addr", "add", service, "dev", veth]);
    ns.run_ok(&["ip", "link", "set", veth, "up"]);
    ns
}

/// A connection from inside `ns` that has had one NULL call answered; then
/// how long until it is reset (`None`: not within `wait`).
fn client_connection_reset_after(
    netns: &Path,
    server: std::net::SocketAddr,
    connected: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
    wait: Duration,
) -> Option<Duration> {
    use std::io::{Read, Write};
    let netns = std::fs::File::open(netns).unwrap();
    // SAFETY: setns on this thread only (network namespaces are per thread).
    assert_eq!(unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&netns), libc::CLONE_NEWNET) }, 0);
    let mut s = std::net::TcpStream::connect_timeout(&server, Duration::from_secs(10)).unwrap();
    // NFS NULL: record mark, xid, CALL, RPC 2, NFS 100003 v3 proc 0, two AUTH_NONE.
    let call: Vec<u8> =
        [0x8000_0028u32, 7, 0, 2, 100_003, 3, 0, 0, 0, 0, 0].iter().flat_map(|w| w.to_be_bytes()).collect();
    s.write_all(&call).unwrap();
    let mut reply = [0u8; 28];
    s.read_exact(&mut reply).unwrap();
    connected.send(()).unwrap();
    go.recv().unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let t = Instant::now();
    match s.read(&mut reply) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some(t.elapsed()),
        other => {
            eprintln!("client read after the failover: {other:?}");
            None
        }
    }
}

/// `keel serve --config FILE` in `ns`, once it answers at `service`.
fn serve_in(ns: &keel_testkit::netns::Netns, config: &Path, service: std::net::SocketAddr) -> std::process::Child {
    let keel = keel_bin();
    let keel = keel.to_str().unwrap();
    let mut cmd = ns.cmd(&[keel, "serve", "--config", config.to_str().unwrap()]);
    let child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ns.run(&[keel, "probe", "--address", &service.to_string(), "--timeout", "1"]).status.success() {
        assert!(Instant::now() < deadline, "keel in {} did not start", ns.name);
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// `keel serve --config FILE` (under `[ha]`) in `ns`, which does not hold
/// the listen address yet: once its administration socket answers, its
/// monitor's probe passes and says why it called nothing.
fn serve_before_the_address(ns: &keel_testkit::netns::Netns, config: &Path) -> std::process::Child {
    let keel = keel_bin();
    let keel = keel.to_str().unwrap();
    let config = config.to_str().unwrap();
    let mut cmd = ns.cmd(&[keel, "serve", "--config", config]);
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ns.run(&[keel, "status", "--config", config, "--timeout", "1"]).status.success() {
        if let Ok(Some(exit)) = child.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("keel in {} could not start before its address came up ({exit}): {err}", ns.name);
        }
        assert!(Instant::now() < deadline, "keel in {} did not start", ns.name);
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe = ns.run(&[keel, "probe", "--config", config, "--timeout", "1"]);
    assert!(probe.status.success(), "{probe:?}");
    assert!(probe.stdout.contains("not on this node (yet): not probed"), "{probe:?}");
    child
}

/// Without `[ha]` a listen address this host does not hold is an error at
/// start that says what to do (under `[ha]` Keel listens on it before it
/// comes up: see the tickle test).
#[test]
fn without_ha_a_listen_address_this_host_does_not_hold_stops_the_start_and_says_why() {
    require_root();
    let _mounts = MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("keel-ha-nothere-{}", std::process::id()));
    let config = ha_config(&dir, &dir.join("state"), &dir.join("export"), 2049);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("enabled = true", "enabled = false").replace("127.0.0.1:2049", "10.77.9.9:2049"),
    )
    .unwrap();
    let ns = keel_testkit::netns::Netns::new("nothere");
    let keel = keel_bin();
    let mut cmd = ns.cmd(&[keel.to_str().unwrap(), "serve", "--config", config.to_str().unwrap()]);
    let out = run_timeout(&mut cmd, CMD_TIMEOUT);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("cannot listen on 10.77.9.9:2049"), "{out:?}");
    assert!(
        out.stderr.contains("not an address of this host") && out.stderr.contains("[ha] enabled = true"),
        "{out:?}"
    );
}

/// The old node vanishes without closing its connections (its link goes
/// down before it dies, as in a power cut); the new node holds the same
/// address and the same state_dir. With [ha] it announces the address
/// (a gratuitous ARP) and tickles the client, whose connection is reset at
/// once, so it reconnects; without, the client hears nothing (it would
/// wait for its own retransmission timer).
#[test]
fn a_new_node_tickles_the_old_nodes_clients_into_reconnecting() {
    require_root();
    let _mounts = MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let disk = XfsDisk::new("ha-tickle");
    let id = std::process::id() % 10_000;
    let bridge = format!("ktb{id}");
    host(&["ip", "link", "add", &bridge, "type", "bridge"]);
    host(&["ip", "link", "set", &bridge, "up"]);
    struct Bridge(String);
    impl Drop for Bridge {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }
    let _bridge = Bridge(bridge.clone());
    let client = node("tkc", &bridge, &format!("ktc{id}"), "10.77.0.1/24");
    let service: std::net::SocketAddr = "10.77.0.100:2049".parse().unwrap();
    // Port 2049 is the namespaces' own.
    let config = ha_config(&disk.mnt.join(".."), &disk.mnt.join("state"), &disk.mnt.join("export"), 2049);
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace("127.0.0.1:2049", "10.77.0.100:2049").replace("\"127.0.0.1\"", "\"10.77.0.0/24\"");
    std::fs::write(&config, &text).unwrap();
    let plain = config.with_extension("plain.toml");
    std::fs::write(&plain, text.replace("enabled = true", "enabled = false")).unwrap();

    for (round, (file, tickled)) in [(&config, true), (&plain, false)].into_iter().enumerate() {
        let old = node("tko", &bridge, &format!("kto{id}{round}"), "10.77.0.100/24");
        let mut keel_old = serve_in(&old, &config, service);
        let (connected_tx, connected) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let client_ns = client.path();
        let client_thread = std::thread::spawn(move || {
            client_connection_reset_after(&client_ns, service, connected_tx, go_rx, Duration::from_secs(4))
        });
        connected.recv_timeout(Duration::from_secs(20)).unwrap();
        // The recorder writes the list within a second.
        let recorded = disk.mnt.join("state/connections");
        let deadline = Instant::now() + Duration::from_secs(10);
        // A record in a binary frame (see tickle.rs): the text is in it.
        while !String::from_utf8_lossy(&std::fs::read(&recorded).unwrap_or_default()).contains("10.77.0.1:") {
            assert!(Instant::now() < deadline, "the connection was not recorded");
            std::thread::sleep(Duration::from_millis(100));
        }

        // The power cut: the link first, so no FIN or RST reaches the client.
        old.run_ok(&["ip", "link", "set", &format!("kto{id}{round}"), "down"]);
        keel_old.kill().unwrap();
        keel_old.wait().unwrap();
        drop(old);
        // The dead node's orphaned socket keeps its namespace (and the
        // veth's host end) alive for minutes: cut the cable.
        host(&["ip", "link", "del", &format!("kto{id}{round}p")]);
        // The client still has the old node's hardware address for the
        // service address: no IPaddr2 here announces the new owner before
        // the tickles, Keel must (with the old node's, the client's answer
        // to the first tickle is lost, and it answers no other for half a
        // second: it reconnected 0.5 s late in half the lab's failovers).

        let new_veth = format!("ktn{id}{round}");
        let (new, mut keel_new) = if tickled {
            // As `keel ha init`'s group starts it: the server first, the
            // floating address after it. Keel listens on the address
            // before this node holds it, its monitor's probe passes
            // meanwhile, and the tickles wait for the address.
            let new = node("tkn", &bridge, &new_veth, "10.77.0.2/24");
            // It knows the client's hardware address already, as a node
            // that served the client before may: its tickles go out with
            // no ARP request of its own, which would tell the client too.
            new.run_ok(&["ping", "-c", "1", "-W", "2", "10.77.0.1"]);
            let keel_new = serve_before_the_address(&new, file);
            new.run_ok(&["ip", "addr", "add", "10.77.0.100/24", "dev", &new_veth]);
            (new, keel_new)
        } else {
            let new = node("tkn", &bridge, &new_veth, "10.77.0.100/24");
            let keel_new = serve_in(&new, file, service);
            (new, keel_new)
        };
        go.send(()).unwrap();
        let reset = client_thread.join().unwrap();
        keel_new.kill().unwrap();
        keel_new.wait().unwrap();
        if tickled {
            let after = reset.expect("the client's connection was reset by the tickle");
            assert!(after < Duration::from_secs(3), "reset after {after:?}");
            let link = new.run_ok(&["ip", "-o", "link", "show", &new_veth]).stdout;
            let mac = link.split_whitespace().skip_while(|w| *w != "link/ether").nth(1).unwrap().to_string();
            let neigh = client.run_ok(&["ip", "neigh", "show", "10.77.0.100"]).stdout;
            assert!(neigh.contains(&mac), "the client takes the new node ({mac}) for the address: {neigh}");
        } else {
            assert_eq!(reset, None, "control: without [ha] nothing tells the client");
        }
        drop(new);
        let _ = Command::new("ip").args(["link", "del", &format!("ktn{id}{round}p")]).status();
    }
}
