//! A two-node high-availability lab on one machine: real Corosync and
//! Pacemaker on two "nodes" made of Linux namespaces, emulated power
//! switches as their fence devices, a shared disk, and fault injectors.
//!
//! # Layout
//!
//! Every lab has namespaces of its own (names carry the test's PID and a
//! counter, so labs in parallel tests do not collide), so its addresses
//! are fixed:
//!
//! - switch netns `keel-ha-sw-*`: bridges `br-pub` (public, 10.77.1.0/24)
//!   and `br-hb` (heartbeat, 10.77.2.0/24). Each node plugs into both
//!   through veth pairs whose switch ends are `pub-a`/`hb-a`, `pub-b`/`hb-b`
//!   (pulling a cable = setting a switch end down). The power switches
//!   listen on 10.77.2.254:7000, on the heartbeat bridge, as an IPMI/PDU
//!   management network would: a node that loses the heartbeat network
//!   loses its fence devices too (see [`HaLab::heartbeat_switch_down`]).
//! - node netns `keel-ha-a-*`, `keel-ha-b-*`: `pub0` 10.77.1.1 / .2 and
//!   `hb0` 10.77.2.1 / .2. The floating service address is
//!   [`FLOATING_IP`] 10.77.1.100 on `pub0` (ocf:heartbeat:IPaddr2), and a
//!   second service's (active/active) [`FLOATING_IP2`] 10.77.1.101.
//! - client netns `keel-ha-cl-*`: 10.77.1.10 on the public bridge.
//!
//! A node is `ip netns exec NODE unshare --mount --uts --ipc --pid --fork
//! --mount-proc ha/node-init`: its own host name (`keel-ha-a`, `keel-ha-b`,
//! the Corosync node names), its own PID 1 (the init script, which starts
//! `corosync -f` and `pacemakerd` and reaps), and private mounts. Commands
//! run in a node through `nsenter -t INIT -n -m -p -u -i`. All of a node's
//! processes are in a freezer cgroup of their own (for [`HaLab::hang`]).
//!
//! # What collides between two Corosync/Pacemaker instances on one host
//!
//! - Abstract unix sockets (every libqb IPC endpoint: `@cib_rw`, `@crmd`,
//!   `@stonith-ng`, `@cpg`, ...): per network namespace, so one netns per
//!   node isolates them.
//! - `/dev/shm/qb-*` ring buffers, named after PIDs, and PIDs repeat in
//!   PID namespaces: a private tmpfs on `/dev/shm`.
//! - `/run` (`corosync.pid`, `/run/crm`, `/run/resource-agents`, where
//!   Dummy and IPaddr2 keep their state, `sbd.pid`): a private tmpfs.
//! - `/etc/corosync` (corosync.conf, authkey), `/var/lib/corosync`,
//!   `/var/lib/pacemaker` (the CIB; hacluster:haclient), `/var/lib/heartbeat`,
//!   `/var/log` (Corosync's, Pacemaker's and crmsh's logs: crmsh will not
//!   start without `/var/log/crmsh`): bind mounts of per-node directories
//!   under the lab's temp dir, so a node keeps its CIB across power cycles
//!   and its logs can be read from the host after it is gone.
//! - The host name (Pacemaker's and crmsh's idea of "this node"): a UTS
//!   namespace per node.
//! - `/proc/sysrq-trigger`: Pacemaker's panic (a node that learns it was
//!   fenced, `fence-reaction=panic`, sbd) writes `b` there, which would
//!   reboot the host. The init binds `/dev/null` over it; the panic's
//!   reboot(2) then only kills the node's PID namespace.
//! - Fence agents: pacemaker-fenced runs them from `/usr/sbin` only (and
//!   asks them for `-o metadata`); the lab's `fence_keel_lab` joins the
//!   stock ones there through a read-only overlay in the node.
//!
//! # Shared storage
//!
//! Two shared disks ([`SharedDisk`]: one per service of an active/active
//! pair), each an image file with one loop device per node over it (loop
//! devices over one file share its page cache, so both see the same disk,
//! as two paths to a SAN LUN do), XFS made by the lab. Each node sees its
//! own devices as [`SHARED_DISK`] and [`SHARED_DISK2`]. Losing a node's
//! path limits that loop device to 0 bytes: every new I/O fails with EIO,
//! as a dead path does (see `loop_set_path` for why not an offset; this
//! kernel has no device-mapper, so no dm `error` table). A power cut and
//! [`HaLab::storage_path_loss`] take all of a node's paths, as a dead HBA
//! does; [`HaLab::disk_path_loss`] one.
//!
//! # Power switches
//!
//! Two switches ([`Switch::Ipmi`], level 1, and [`Switch::Pdu`], level 2),
//! served by the lab on 10.77.2.254:7000 in the switch netns, a thread per
//! request, and reached by the `fence_keel_lab` agent. A switch works, or
//! ([`SwitchMode`]) refuses (hangs up at once), hangs (takes the request
//! and never answers, as a dead BMC does: the agent waits until its own
//! timeout, 5 s, or Pacemaker's ends it) or is slow (acts and answers
//! after a delay, acting even if the agent gave up). "off" takes the node's NICs
//! down (so its kernel stops answering ARP and its floating IP dies with
//! it; a killed process's addresses otherwise stay up), thaws it, and
//! SIGKILLs its PID-namespace init: every process of the node dies, its
//! mounts (the shared XFS) go with its mount namespace. "on" resets its
//! addresses and boots it again (corosync, pacemaker). The lab records
//! every request ([`HaLab::fence_events`]).
//!
//! # Hang
//!
//! [`HaLab::hang`] freezes the node's cgroup (v1 freezer, or v2
//! `cgroup.freeze`): no process of the node runs, but its network stack is
//! the kernel's and keeps answering: the client still pings the floating
//! IP of a frozen node (tests/ha_lab.rs checks it), and by the same token
//! ARP and TCP handshakes to a listening socket (up to its backlog) still
//! complete. A frozen node looks alive to anything that does not wait for
//! an application's answer; only fencing ends it (the switch thaws it and
//! kills it).
//!
//! # Timings (measured here: 2 cores, tests/ha_lab.rs, two runs)
//!
//! - Lab start to both nodes online: 5.2-5.8 s (the lab seeds the CIB
//!   with dc-deadtime=2s; with the default 20 s it was 24 s); the group
//!   [Filesystem, IPaddr2, Dummy] started on A about 2.5 s later.
//! - Fault to the group started on B (fencing stonith-action=off):
//!
//!   | fault                               | token 1000 | 2000      | 3000      |
//!   |-------------------------------------|------------|-----------|-----------|
//!   | crash of A                          | 3.6-3.7 s  | 4.5-5.8 s | 6.7-7.9 s |
//!   | heartbeat link loss on A            |            | 4.8-5.8 s |           |
//!   | hang of A                           |            | 4.8-5.9 s |           |
//!   | level 1 switch failed + crash of A  |            | 5.7-6.4 s |           |
//!   | storage path loss on A (no fencing) |            | 5.5-5.6 s |           |
//!
//!   (token 2000 ms: consensus 2400 ms by default; the storage case is
//!   driven by the 5 s Filesystem monitor, not by the token.) Token 1000 ms
//!   held on this 2-core machine with one lab running (lower was not
//!   tried); 2000 ms is the default for margin when the machine is busy.
//! - Heartbeat switch failure: no node can fence, the group stays on A,
//!   B never starts it (20 s watched).

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::disk::{LoopPath, loop_set_path};
use crate::netns::Netns;
use crate::procs::{Output, TempDir, run_ok, run_timeout, wait_for, wait_timeout};
use crate::server::require_root;

/// The floating service address, for ocf:heartbeat:IPaddr2 on `pub0`.
pub const FLOATING_IP: &str = "10.77.1.100";
/// A second service's floating address (active/active), also on `pub0`.
pub const FLOATING_IP2: &str = "10.77.1.101";
/// The client's address on the public network.
pub const CLIENT_IP: &str = "10.77.1.10";
/// The shared disk, as every node sees it (its own path to it).
pub const SHARED_DISK: &str = "/run/keel-ha/disk";
/// The second shared disk (a second service's, active/active).
pub const SHARED_DISK2: &str = "/run/keel-ha/disk2";
/// Where the power switches listen (the heartbeat network).
pub const SWITCH_ADDR: &str = "10.77.2.254";
pub const SWITCH_PORT: u16 = 7000;
/// The public NIC in a node, for IPaddr2's `nic=`.
pub const PUBLIC_NIC: &str = "pub0";

const CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests the switches serve at once (each on a thread): far more than
/// two nodes' fence agents make.
const SWITCH_REQUESTS_MAX: usize = 32;
/// Each shared disk's (sparse) image: room for an active/active case's
/// writers, 2 × 128 MiB through a crash and as much through a failback.
const IMAGE_BYTES: u64 = 1 << 30;
const FIRST_CIB: &str = r#"<cib validate-with="pacemaker-3.9" epoch="1" num_updates="0" admin_epoch="0">
  <configuration>
    <crm_config>
      <cluster_property_set id="cib-bootstrap-options">
        <nvpair id="cib-bootstrap-options-dc-deadtime" name="dc-deadtime" value="2s"/>
      </cluster_property_set>
    </crm_config>
    <nodes/>
    <resources/>
    <constraints/>
  </configuration>
  <status/>
</cib>
"#;
const NODE_INIT: &str = include_str!("../ha/node-init");
const FENCE_AGENT: &str = include_str!("../ha/fence_keel_lab");

/// The stonith resources of both switches and the two-level fencing
/// topology (switch 1 = ipmi, switch 2 = pdu, for both nodes), in crm
/// configure syntax, for [`HaLab::configure`]. (stonith-enabled is true
/// by default.)
pub const FENCING_CRM: &str = "\
primitive st-ipmi stonith:fence_keel_lab params switch=ipmi pcmk_host_list=\"keel-ha-a keel-ha-b\" \
pcmk_host_check=static-list op monitor interval=60s
primitive st-pdu stonith:fence_keel_lab params switch=pdu pcmk_host_list=\"keel-ha-a keel-ha-b\" \
pcmk_host_check=static-list op monitor interval=60s
fencing_topology keel-ha-a: st-ipmi st-pdu keel-ha-b: st-ipmi st-pdu
";

/// Why a lab cannot run here (not root, a package missing), or None.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the HA lab needs root".into());
    }
    for tool in ["corosync", "pacemakerd", "crm", "crm_mon", "mkfs.xfs", "nsenter", "unshare"] {
        let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"].iter().any(|d| Path::new(d).join(tool).exists());
        if !found {
            return Some(format!(
                "{tool} is not installed (apt install pacemaker corosync crmsh resource-agents xfsprogs)"
            ));
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    A,
    B,
}

impl Node {
    pub const ALL: [Node; 2] = [Node::A, Node::B];

    /// The host name, Corosync and Pacemaker node name.
    pub fn name(self) -> &'static str {
        match self {
            Node::A => "keel-ha-a",
            Node::B => "keel-ha-b",
        }
    }

    pub fn from_name(name: &str) -> Option<Node> {
        Node::ALL.into_iter().find(|n| n.name() == name)
    }

    pub fn other(self) -> Node {
        match self {
            Node::A => Node::B,
            Node::B => Node::A,
        }
    }

    fn letter(self) -> &'static str {
        match self {
            Node::A => "a",
            Node::B => "b",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    pub fn public_ip(self) -> String {
        format!("10.77.1.{}", self.index() + 1)
    }

    pub fn heartbeat_ip(self) -> String {
        format!("10.77.2.{}", self.index() + 1)
    }
}

/// The emulated power switches, by fencing level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Level 1 (a BMC).
    Ipmi,
    /// Level 2 (a switched PDU).
    Pdu,
}

impl Switch {
    pub fn name(self) -> &'static str {
        match self {
            Switch::Ipmi => "ipmi",
            Switch::Pdu => "pdu",
        }
    }

    pub fn level(self) -> u32 {
        self as u32 + 1
    }

    fn from_name(name: &str) -> Option<Switch> {
        [Switch::Ipmi, Switch::Pdu].into_iter().find(|s| s.name() == name)
    }
}

/// The lab's shared disks, each with its own image file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedDisk {
    /// [`SHARED_DISK`].
    First,
    /// [`SHARED_DISK2`].
    Second,
}

impl SharedDisk {
    pub const ALL: [SharedDisk; 2] = [SharedDisk::First, SharedDisk::Second];

    /// Where every node sees it.
    pub fn path(self) -> &'static str {
        match self {
            SharedDisk::First => SHARED_DISK,
            SharedDisk::Second => SHARED_DISK2,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How an emulated power switch behaves ([`HaLab::fence_device_failure`]
/// and its neighbours set it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchMode {
    /// Acts and answers at once.
    Working,
    /// Reads each request and hangs up: a device that refuses at once.
    Refusing,
    /// Reads each request and never answers, holding the connection until
    /// it is repaired: a dead BMC, which the agent waits on until a
    /// timeout (its own, or Pacemaker's) ends the wait.
    Hung,
    /// Waits this long, then acts and answers: a slow BMC. It acts even if
    /// the agent has given up by then, as a real one does.
    Slow(Duration),
}

/// One request a power switch received.
#[derive(Clone, Debug)]
pub struct FenceEvent {
    pub switch: Switch,
    /// on, off, reboot, status, monitor, list.
    pub action: String,
    /// The node's name, or "-".
    pub target: String,
    /// False when the switch refused or hung and did not act.
    pub answered: bool,
    pub at: Instant,
}

/// How to build a lab.
#[derive(Clone, Debug)]
pub struct HaConfig {
    /// Corosync's totem token timeout (in the lab's own corosync.conf:
    /// unused when `corosync_conf` is given).
    pub token_ms: u32,
    /// Corosync's consensus timeout; Corosync's default (1.2 × token) if
    /// None.
    pub consensus_ms: Option<u32>,
    /// A second Corosync link (knet link 1) on the public network.
    pub second_link: bool,
    /// Start Corosync and Pacemaker on boot, and wait until both nodes are
    /// online.
    pub start_cluster: bool,
    /// A corosync.conf to install instead of the lab's own (say, the one
    /// `keel ha init` wrote); its logging goes to the lab's log directory
    /// whatever it says.
    pub corosync_conf: Option<String>,
}

impl Default for HaConfig {
    fn default() -> Self {
        HaConfig { token_ms: 2000, consensus_ms: None, second_link: false, start_cluster: true, corosync_conf: None }
    }
}

// ---------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------

/// Two cluster nodes, their networks, switches and shared disk; all torn
/// down on drop, also when the test panics.
pub struct HaLab {
    inner: Arc<Inner>,
    switch_thread: Option<JoinHandle<()>>,
}

struct Inner {
    cfg: HaConfig,
    dir: TempDir,
    sw: Netns,
    client: Netns,
    nodes: [NodeSlot; 2],
    /// One image file per [`SharedDisk`].
    images: [PathBuf; 2],
    switch_modes: Mutex<[SwitchMode; 2]>,
    /// The connections a hung switch holds, unanswered, until repaired.
    held: Mutex<Vec<TcpStream>>,
    /// One power action at a time, as the switch thread used to serve
    /// them (the threads of slow requests would otherwise race).
    power: Mutex<()>,
    /// The threads serving requests, joined at drop.
    requests: Mutex<Vec<JoinHandle<()>>>,
    events: Mutex<Vec<FenceEvent>>,
    stop: AtomicBool,
}

struct NodeSlot {
    node: Node,
    ns: Netns,
    dir: PathBuf,
    cgroup: Freezer,
    /// This node's loop devices over the shared images, by
    /// [`SharedDisk`] (fewer while the lab is being made).
    disks: Mutex<Vec<String>>,
    state: Mutex<NodeState>,
    /// Switch ends of the node's cables plugged in: [public, heartbeat].
    cables: Mutex<[bool; 2]>,
}

#[derive(Default)]
struct NodeState {
    /// `ip netns exec ... unshare ...`, the parent of the node's init.
    unshare: Option<Child>,
    /// The host PID of the node's init (its PID 1).
    init_pid: Option<i32>,
    frozen: bool,
}

impl HaLab {
    /// A lab with the default configuration, cluster running.
    pub fn new() -> Self {
        Self::start(HaConfig::default())
    }

    pub fn start(cfg: HaConfig) -> Self {
        require_root();
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let dir = TempDir::new("ha");
        let sw = Netns::new("ha-sw");
        let client = Netns::new("ha-cl");
        let nodes = Node::ALL.map(|node| {
            let ns = Netns::new(&format!("ha-{}", node.letter()));
            let dir = dir.path().join(format!("node-{}", node.letter()));
            let cgroup = Freezer::new(&format!("keel-ha-{id}-{}", node.letter()));
            NodeSlot {
                node,
                ns,
                dir,
                cgroup,
                disks: Mutex::new(Vec::new()),
                state: Mutex::new(NodeState::default()),
                cables: Mutex::new([true, true]),
            }
        });
        let images = SharedDisk::ALL.map(|d| dir.path().join(format!("shared{}.img", d.index() + 1)));
        let inner = Arc::new(Inner {
            cfg,
            dir,
            sw,
            client,
            nodes,
            images,
            switch_modes: Mutex::new([SwitchMode::Working; 2]),
            held: Mutex::new(Vec::new()),
            power: Mutex::new(()),
            requests: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        // From here on, Drop cleans up whatever was made.
        let mut lab = HaLab { inner, switch_thread: None };
        lab.inner.make_network();
        lab.inner.make_disks();
        lab.inner.write_files();
        let listener = bind_in_netns(&lab.inner.sw, &format!("{SWITCH_ADDR}:{SWITCH_PORT}"));
        let inner = lab.inner.clone();
        lab.switch_thread = Some(std::thread::spawn(move || Inner::serve_switches(&inner, listener)));
        for node in Node::ALL {
            lab.inner.power_on(node);
        }
        if lab.inner.cfg.start_cluster {
            lab.wait_online(Duration::from_secs(60));
        }
        lab
    }

    pub fn config(&self) -> &HaConfig {
        &self.inner.cfg
    }

    /// The client's network namespace (on the public network).
    pub fn client(&self) -> &Netns {
        &self.inner.client
    }

    /// A tap device `name` plugged into the public network, made once, for
    /// a VM (the kernel client harness's `--tap`): the namespace to start
    /// the VM in, which holds the device.
    pub fn public_tap(&self, name: &str) -> &Netns {
        let sw = &self.inner.sw;
        if !sw.run(&["ip", "link", "show", name]).status.success() {
            sw.run_ok(&["ip", "tuntap", "add", "dev", name, "mode", "tap"]);
            sw.run_ok(&["ip", "link", "set", name, "master", "br-pub", "up"]);
        }
        sw
    }

    /// The node's network namespace (for host-side inspection; commands
    /// that need the node's mounts or daemons go through [`HaLab::run`]).
    pub fn netns(&self, node: Node) -> &Netns {
        &self.inner.slot(node).ns
    }

    /// The lab's directory on the host (per-node state and logs under
    /// `node-a/`, `node-b/`).
    pub fn dir(&self) -> &Path {
        self.inner.dir.path()
    }

    /// The node's /var/log, from the host.
    pub fn log_dir(&self, node: Node) -> PathBuf {
        self.inner.slot(node).dir.join("log")
    }

    pub fn is_powered(&self, node: Node) -> bool {
        self.inner.slot(node).state.lock().unwrap().init_pid.is_some()
    }

    /// `argv` in the node (all its namespaces); panics if it is off.
    pub fn cmd(&self, node: Node, argv: &[&str]) -> Command {
        self.inner.cmd(node, argv)
    }

    pub fn run(&self, node: Node, argv: &[&str]) -> Output {
        run_timeout(&mut self.cmd(node, argv), CMD_TIMEOUT)
    }

    /// Like `run`, failing the test unless the command succeeds.
    pub fn run_ok(&self, node: Node, argv: &[&str]) -> Output {
        run_ok(&mut self.cmd(node, argv), CMD_TIMEOUT)
    }

    /// A shell script in the node.
    pub fn sh(&self, node: Node, script: &str) -> Output {
        self.run(node, &["sh", "-c", script])
    }

    /// crmsh in the node, which must succeed.
    pub fn crm(&self, node: Node, args: &[&str]) -> Output {
        let mut argv = vec!["crm"];
        argv.extend_from_slice(args);
        self.run_ok(node, &argv)
    }

    /// Loads `crm configure` text into the CIB through `node` (`crm
    /// configure load update`), which must succeed; what crmsh printed
    /// (its warnings go to stderr).
    pub fn configure(&self, node: Node, crm_text: &str) -> Output {
        static N: AtomicU32 = AtomicU32::new(0);
        let file = self.dir().join(format!("configure-{}.crm", N.fetch_add(1, Ordering::SeqCst)));
        std::fs::write(&file, crm_text).unwrap();
        self.crm(node, &["configure", "load", "update", file.to_str().unwrap()])
    }

    /// `crm_mon -1` as `node` sees the cluster, for messages.
    pub fn status(&self, node: Node) -> String {
        if !self.inner.is_live(node) {
            return format!("{} is off or frozen\n", node.name());
        }
        self.run(node, &["crm_mon", "-1", "-r", "-f"]).text()
    }

    /// Status of both nodes, what the resource agents logged, and the tail
    /// of their Pacemaker logs, for a failing test's message. The agents'
    /// lines come apart from the tail: the one that says why a start
    /// failed is often older than the last 40 lines.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        for node in Node::ALL {
            s += &format!("--- {} ---\n{}", node.name(), self.status(node));
            let log = std::fs::read_to_string(self.log_dir(node).join("pacemaker/pacemaker.log")).unwrap_or_default();
            s += &agent_lines(&log);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            s += "--- pacemaker.log (tail) ---\n";
            for l in tail.into_iter().rev() {
                s += l;
                s += "\n";
            }
        }
        s += &format!("--- fence events ---\n{:?}\n", self.fence_events());
        s
    }

    /// Waits (bounded) until both nodes are online, as both see it, with a
    /// DC elected.
    pub fn wait_online(&self, timeout: Duration) {
        let ok = wait_for(timeout, || {
            Node::ALL
                .into_iter()
                .all(|obs| {
                    let xml = self.crm_mon_xml(obs);
                    xml.contains("with_quorum=\"true\"") && Node::ALL.into_iter().all(|n| node_online(&xml, n.name()))
                })
                .then_some(())
        });
        assert!(ok.is_some(), "the cluster did not come up within {timeout:?}:\n{}", self.diagnostics());
    }

    /// `crm_mon -1 --output-as=xml` as `observer` sees it ("" if it is off,
    /// frozen, or Pacemaker does not answer).
    pub fn crm_mon_xml(&self, observer: Node) -> String {
        if !self.inner.is_live(observer) {
            return String::new();
        }
        let out = run_timeout(&mut self.cmd(observer, &["crm_mon", "-1", "--output-as=xml"]), CMD_TIMEOUT);
        if out.status.success() { out.stdout } else { String::new() }
    }

    /// Where `resource` (a primitive or a group: all of its members) is
    /// started, as the first live node sees it.
    pub fn where_is(&self, resource: &str) -> Option<Node> {
        let observer = Node::ALL.into_iter().find(|&n| self.inner.is_live(n))?;
        self.where_is_seen_by(observer, resource)
    }

    /// Where `resource` is started (role Started, not failed, on one node),
    /// as `observer` sees it.
    pub fn where_is_seen_by(&self, observer: Node, resource: &str) -> Option<Node> {
        started_on(&self.crm_mon_xml(observer), resource).and_then(|n| Node::from_name(&n))
    }

    /// Waits until `resource` is started on `node` as `node` sees it;
    /// returns how long that took, or panics with the cluster's state.
    pub fn wait_until_running_on(&self, resource: &str, node: Node, timeout: Duration) -> Duration {
        let t0 = Instant::now();
        let ok = wait_for(timeout, || (self.where_is_seen_by(node, resource) == Some(node)).then_some(()));
        assert!(
            ok.is_some(),
            "{resource} was not started on {} within {timeout:?}:\n{}",
            node.name(),
            self.diagnostics()
        );
        t0.elapsed()
    }

    // -----------------------------------------------------------------------
    // Faults and repairs
    // -----------------------------------------------------------------------

    /// Power cut without warning (a kernel panic): NICs down, the path to
    /// the shared disk gone (so nothing the node held in memory reaches
    /// it), every process of the node killed. [`HaLab::power_on`] boots it again.
    pub fn crash(&self, node: Node) {
        self.inner.power_off(node);
    }

    pub fn power_on(&self, node: Node) {
        self.inner.power_on(node);
    }

    /// Freezes every process of the node (its network stack, the kernel's,
    /// goes on answering ARP, ping and TCP handshakes).
    pub fn hang(&self, node: Node) {
        let slot = self.inner.slot(node);
        let mut st = slot.state.lock().unwrap();
        assert!(st.init_pid.is_some(), "{} is off", node.name());
        slot.cgroup.freeze(true);
        st.frozen = true;
    }

    pub fn unhang(&self, node: Node) {
        let slot = self.inner.slot(node);
        let mut st = slot.state.lock().unwrap();
        slot.cgroup.freeze(false);
        st.frozen = false;
    }

    /// Pulls the node's heartbeat cable (at the switch).
    pub fn heartbeat_link_down(&self, node: Node) {
        self.inner.set_cable(node, 1, false);
    }

    pub fn heartbeat_link_up(&self, node: Node) {
        self.inner.set_cable(node, 1, true);
    }

    /// Pulls the node's public cable (at the switch).
    pub fn public_link_down(&self, node: Node) {
        self.inner.set_cable(node, 0, false);
    }

    pub fn public_link_up(&self, node: Node) {
        self.inner.set_cable(node, 0, true);
    }

    /// The heartbeat switch fails: no node reaches the other over the
    /// heartbeat network, nor the power switches, which are on it.
    pub fn heartbeat_switch_down(&self) {
        self.inner.sw.run_ok(&["ip", "link", "set", "br-hb", "down"]);
    }

    pub fn heartbeat_switch_up(&self) {
        self.inner.sw.run_ok(&["ip", "link", "set", "br-hb", "up"]);
    }

    /// The switch refuses: it reads each request and hangs up at once.
    pub fn fence_device_failure(&self, switch: Switch) {
        self.inner.set_switch_mode(switch, SwitchMode::Refusing);
    }

    /// The switch hangs, as a dead BMC: it takes each request and never
    /// answers, so the agent waits until a timeout.
    pub fn fence_device_hang(&self, switch: Switch) {
        self.inner.set_switch_mode(switch, SwitchMode::Hung);
    }

    /// The switch is slow: it acts and answers `delay` after each request.
    pub fn fence_device_slow(&self, switch: Switch, delay: Duration) {
        self.inner.set_switch_mode(switch, SwitchMode::Slow(delay));
    }

    /// The switch works again; the connections it held hung are closed.
    pub fn fence_device_repair(&self, switch: Switch) {
        self.inner.set_switch_mode(switch, SwitchMode::Working);
    }

    /// The node's paths to every shared disk die (its HBA): every I/O
    /// through them fails with EIO (a mounted XFS shuts down).
    pub fn storage_path_loss(&self, node: Node) {
        for disk in SharedDisk::ALL {
            self.disk_path_loss(node, disk);
        }
    }

    pub fn storage_path_repair(&self, node: Node) {
        for disk in SharedDisk::ALL {
            self.disk_path_repair(node, disk);
        }
    }

    /// The node's path to one shared disk dies (the other's stays).
    pub fn disk_path_loss(&self, node: Node, disk: SharedDisk) {
        loop_set_path(&self.inner.loop_device(node, disk), LoopPath::Dead);
    }

    pub fn disk_path_repair(&self, node: Node, disk: SharedDisk) {
        loop_set_path(&self.inner.loop_device(node, disk), LoopPath::Alive);
    }

    /// Every request the switches received, oldest first.
    pub fn fence_events(&self) -> Vec<FenceEvent> {
        self.inner.events.lock().unwrap().clone()
    }

    /// The power actions (on, off, reboot) on `node`, without the
    /// monitoring and status requests.
    pub fn power_actions(&self, node: Node) -> Vec<FenceEvent> {
        self.fence_events()
            .into_iter()
            .filter(|e| e.target == node.name() && matches!(e.action.as_str(), "on" | "off" | "reboot"))
            .collect()
    }
}

impl Default for HaLab {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for HaLab {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.switch_thread.take() {
            let _ = t.join();
        }
        for t in std::mem::take(&mut *self.inner.requests.lock().unwrap_or_else(|e| e.into_inner())) {
            let _ = t.join();
        }
        self.inner.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for node in Node::ALL {
            self.inner.kill_node(node);
        }
        for slot in &self.inner.nodes {
            slot.cgroup.remove();
            for dev in std::mem::take(&mut *slot.disks.lock().unwrap_or_else(|e| e.into_inner())) {
                detach_loop(&dev);
            }
        }
        for image in &self.inner.images {
            let _ = std::fs::remove_file(image);
        }
        // The namespaces and the temp dir go with Inner.
    }
}

impl Inner {
    fn slot(&self, node: Node) -> &NodeSlot {
        &self.nodes[node.index()]
    }

    fn loop_device(&self, node: Node, disk: SharedDisk) -> String {
        let disks = self.slot(node).disks.lock().unwrap();
        disks.get(disk.index()).cloned().unwrap_or_else(|| panic!("{}: no loop device for {disk:?}", node.name()))
    }

    fn is_live(&self, node: Node) -> bool {
        let st = self.slot(node).state.lock().unwrap();
        st.init_pid.is_some() && !st.frozen
    }

    fn cmd(&self, node: Node, argv: &[&str]) -> Command {
        let pid = self.slot(node).state.lock().unwrap().init_pid;
        let pid = pid.unwrap_or_else(|| panic!("{} is powered off", node.name()));
        let mut c = Command::new("nsenter");
        c.args(["-t", &pid.to_string(), "-n", "-m", "-p", "-u", "-i", "--"]).args(argv);
        c.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        c
    }

    fn make_network(&self) {
        let sw = &self.sw;
        for br in ["br-pub", "br-hb"] {
            sw.run_ok(&["ip", "link", "add", br, "type", "bridge"]);
            sw.run_ok(&["ip", "link", "set", br, "up"]);
        }
        sw.run_ok(&["ip", "addr", "add", &format!("{SWITCH_ADDR}/24"), "dev", "br-hb"]);
        for slot in &self.nodes {
            let l = slot.node.letter();
            for (end, nic, br) in [(format!("pub-{l}"), "pub0", "br-pub"), (format!("hb-{l}"), "hb0", "br-hb")] {
                sw.run_ok(&["ip", "link", "add", &end, "type", "veth", "peer", "name", nic, "netns", &slot.ns.name]);
                sw.run_ok(&["ip", "link", "set", &end, "master", br, "up"]);
            }
        }
        sw.run_ok(&["ip", "link", "add", "pub-cl", "type", "veth", "peer", "name", "pub0", "netns", &self.client.name]);
        sw.run_ok(&["ip", "link", "set", "pub-cl", "master", "br-pub", "up"]);
        self.client.run_ok(&["ip", "addr", "add", &format!("{CLIENT_IP}/24"), "dev", "pub0"]);
        self.client.run_ok(&["ip", "link", "set", "pub0", "up"]);
    }

    /// Each shared disk: its image, a loop device per node over it (each
    /// recorded as soon as it exists, for Drop), and an XFS.
    fn make_disks(&self) {
        for disk in SharedDisk::ALL {
            let image = &self.images[disk.index()];
            std::fs::File::create(image).unwrap().set_len(IMAGE_BYTES).unwrap();
            for slot in &self.nodes {
                let out = run_ok(Command::new("losetup").args(["-f", "--show"]).arg(image), CMD_TIMEOUT);
                let mut disks = slot.disks.lock().unwrap();
                assert_eq!(disks.len(), disk.index(), "loop devices made out of order");
                disks.push(out.stdout.trim().to_string());
            }
            run_ok(Command::new("mkfs.xfs").args(["-q", "-f", &self.loop_device(Node::A, disk)]), CMD_TIMEOUT);
        }
    }

    /// The per-node directories (with the owners the packages give them),
    /// corosync.conf and authkey, the init script and the fence agent.
    fn write_files(&self) {
        let d = self.dir.path();
        let exec = |path: &Path, text: &str| {
            std::fs::write(path, text).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exec(&d.join("node-init"), NODE_INIT);
        std::fs::create_dir_all(d.join("sbin")).unwrap();
        exec(&d.join("sbin/fence_keel_lab"), FENCE_AGENT);
        let mut authkey = vec![0u8; 256];
        std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut authkey)).unwrap();
        let conf = self.corosync_conf();
        for slot in &self.nodes {
            let n = &slot.dir;
            for sub in [
                "etc-corosync",
                "var-lib-corosync",
                "var-lib-heartbeat",
                "var-lib-pacemaker/cib",
                "var-lib-pacemaker/pengine",
                "var-lib-pacemaker/blackbox",
                "var-lib-pacemaker/cores",
                "log/pacemaker",
                "log/cluster",
                "log/crmsh",
            ] {
                std::fs::create_dir_all(n.join(sub)).unwrap();
            }
            std::fs::write(n.join("etc-corosync/corosync.conf"), &conf).unwrap();
            // The first CIB, so that the first election does not wait for
            // dc-deadtime's default 20 s (no digest file: Pacemaker takes
            // an unsigned cib.xml as an administrator's edit).
            let cib = n.join("var-lib-pacemaker/cib/cib.xml");
            std::fs::write(&cib, FIRST_CIB).unwrap();
            std::fs::set_permissions(&cib, std::fs::Permissions::from_mode(0o600)).unwrap();
            let key = n.join("etc-corosync/authkey");
            std::fs::write(&key, &authkey).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
            for owned in ["var-lib-pacemaker", "log/pacemaker"] {
                run_ok(Command::new("chown").args(["-R", "hacluster:haclient"]).arg(n.join(owned)), CMD_TIMEOUT);
            }
            run_ok(
                Command::new("sh")
                    .arg("-c")
                    .arg("chmod 750 var-lib-pacemaker/* && chmod 770 log/pacemaker")
                    .current_dir(n),
                CMD_TIMEOUT,
            );
        }
    }

    fn corosync_conf(&self) -> String {
        let cfg = &self.cfg;
        if let Some(given) = &cfg.corosync_conf {
            return given
                .replace("/var/log/corosync/corosync.log", "/var/log/cluster/corosync.log")
                .replace("to_syslog: yes", "to_syslog: no");
        }
        let consensus = cfg.consensus_ms.map(|c| format!("    consensus: {c}\n")).unwrap_or_default();
        let mut nodes = String::new();
        for node in Node::ALL {
            let ring1 =
                if cfg.second_link { format!("        ring1_addr: {}\n", node.public_ip()) } else { String::new() };
            nodes += &format!(
                "    node {{\n        name: {}\n        nodeid: {}\n        ring0_addr: {}\n{ring1}    }}\n",
                node.name(),
                node.index() + 1,
                node.heartbeat_ip()
            );
        }
        format!(
            "# Written by keel_testkit::ha for one lab.\n\
             totem {{\n    version: 2\n    cluster_name: keel-ha\n    transport: knet\n    token: {}\n{consensus}\
             \x20   crypto_cipher: aes256\n    crypto_hash: sha256\n}}\n\
             nodelist {{\n{nodes}}}\n\
             quorum {{\n    provider: corosync_votequorum\n    two_node: 1\n}}\n\
             logging {{\n    to_logfile: yes\n    logfile: /var/log/cluster/corosync.log\n    to_syslog: no\n    \
             to_stderr: no\n    timestamp: on\n}}\n",
            cfg.token_ms
        )
    }

    fn set_cable(&self, node: Node, which: usize, up: bool) {
        let end = format!("{}-{}", ["pub", "hb"][which], node.letter());
        self.slot(node).cables.lock().unwrap()[which] = up;
        self.sw.run_ok(&["ip", "link", "set", &end, if up { "up" } else { "down" }]);
    }

    /// Boots the node: fresh NIC addresses (a floating IP it held is gone,
    /// as after a reboot), then its init. Does nothing if it is on.
    fn power_on(&self, node: Node) {
        let slot = self.slot(node);
        let mut st = slot.state.lock().unwrap();
        if st.init_pid.is_some() {
            return;
        }
        for (nic, ip) in [("pub0", node.public_ip()), ("hb0", node.heartbeat_ip())] {
            slot.ns.run_ok(&["ip", "addr", "flush", "dev", nic]);
            slot.ns.run_ok(&["ip", "addr", "add", &format!("{ip}/24"), "dev", nic]);
            slot.ns.run_ok(&["ip", "link", "set", nic, "up"]);
        }
        let _ = std::fs::remove_file(slot.dir.join("init-ready"));
        let log = std::fs::File::create(slot.dir.join("init.log")).unwrap();
        let disks = slot.disks.lock().unwrap().clone();
        assert_eq!(disks.len(), SharedDisk::ALL.len(), "{}: the lab has no disks yet", node.name());
        // Back from a power cut (power_off) with working disk paths.
        for dev in &disks {
            loop_set_path(dev, LoopPath::Alive);
        }
        let d = self.dir.path();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &slot.ns.name])
            .args(["unshare", "--mount", "--uts", "--ipc", "--pid", "--fork", "--mount-proc"])
            .arg(d.join("node-init"))
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("KEEL_NODE", node.name())
            .env("KEEL_NODE_DIR", &slot.dir)
            .env("KEEL_SBIN", d.join("sbin"))
            .env("KEEL_DISK", &disks[SharedDisk::First.index()])
            .env("KEEL_DISK2", &disks[SharedDisk::Second.index()])
            .env("KEEL_START_CLUSTER", if self.cfg.start_cluster { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let procs = slot.cgroup.procs_file_cstring();
        // SAFETY: between fork and exec only async-signal-safe calls
        // (open, write, close) on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if ok { Ok(()) } else { Err(std::io::Error::last_os_error()) }
            });
        }
        let child = cmd.spawn().expect("start the node's init");
        let unshare_pid = child.id();
        st.unshare = Some(child);
        // `ip netns exec` execs unshare, whose one child is the node's init.
        let init = wait_for(Duration::from_secs(10), || {
            let children = std::fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children")).ok()?;
            children.split_whitespace().next()?.parse::<i32>().ok()
        });
        let Some(init) = init else {
            drop(st);
            self.kill_node(node);
            panic!("{}: no init under unshare ({})", node.name(), self.init_log(node));
        };
        st.init_pid = Some(init);
        st.frozen = false;
        drop(st);
        let ready = wait_for(Duration::from_secs(30), || {
            Path::new(&format!("/proc/{init}/root/run/keel-ha/init-ready")).exists().then_some(())
        });
        if ready.is_none() {
            self.kill_node(node);
            panic!("{} did not boot: {}", node.name(), self.init_log(node));
        }
    }

    fn init_log(&self, node: Node) -> String {
        std::fs::read_to_string(self.slot(node).dir.join("init.log")).unwrap_or_default()
    }

    /// NICs down, then every process of the node killed (bounded waits).
    fn power_off(&self, node: Node) {
        let slot = self.slot(node);
        for nic in ["pub0", "hb0"] {
            slot.ns.run_ok(&["ip", "link", "set", nic, "down"]);
        }
        // What the node held in memory dies with it: its paths to the
        // disks go first, or the teardown of its mount namespace would
        // unmount the shared XFS cleanly, writing back everything a power
        // cut loses.
        for dev in slot.disks.lock().unwrap().iter() {
            loop_set_path(dev, LoopPath::Dead);
        }
        self.kill_node(node);
    }

    fn kill_node(&self, node: Node) {
        let slot = self.slot(node);
        let mut st = slot.state.lock().unwrap();
        // Frozen tasks do not die until thawed.
        slot.cgroup.freeze(false);
        st.frozen = false;
        if let Some(pid) = st.init_pid.take() {
            // SAFETY: kill(2) on the PID we started; the PID namespace dies
            // with its init, and every process in it with SIGKILL.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if let Some(mut child) = st.unshare.take()
            && wait_timeout(&mut child, Duration::from_secs(10)).is_none()
        {
            let _ = child.kill();
            let _ = wait_timeout(&mut child, Duration::from_secs(5));
        }
        // Whatever escaped the PID namespace's death (nothing should).
        let gone = wait_for(Duration::from_secs(10), || {
            let pids = slot.cgroup.pids();
            for &p in &pids {
                // SAFETY: kill(2) on processes of our node's cgroup.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            pids.is_empty().then_some(())
        });
        if gone.is_none() {
            eprintln!("ha lab: processes of {} survive in {:?}", node.name(), slot.cgroup.pids());
        }
    }

    // -----------------------------------------------------------------------
    // The power switches
    // -----------------------------------------------------------------------

    fn set_switch_mode(&self, switch: Switch, mode: SwitchMode) {
        self.switch_modes.lock().unwrap()[switch as usize] = mode;
        if mode == SwitchMode::Working {
            // Whichever switch held them: the agents waiting on them see
            // the connection close, as when a dead BMC's session drops.
            self.held.lock().unwrap().clear();
        }
    }

    /// Accepts requests until the lab stops, each on a thread of its own
    /// (a slow or hung switch must not hold the other one up).
    fn serve_switches(this: &Arc<Inner>, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        while !this.stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let mut requests = this.requests.lock().unwrap();
                    requests.retain(|t| !t.is_finished());
                    if requests.len() >= SWITCH_REQUESTS_MAX {
                        eprintln!("ha lab: {SWITCH_REQUESTS_MAX} switch requests in progress; one refused");
                        continue;
                    }
                    let inner = this.clone();
                    requests.push(std::thread::spawn(move || inner.serve_one(stream)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => eprintln!("ha lab: switch accept: {e}"),
            }
        }
    }

    fn serve_one(&self, stream: TcpStream) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        if BufReader::new(&stream).read_line(&mut line).is_err() {
            return;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let [switch, action, target] = words[..] else {
            let _ = (&stream).write_all(b"ERR bad request\n");
            return;
        };
        let Some(switch) = Switch::from_name(switch) else {
            let _ = (&stream).write_all(b"ERR no such switch\n");
            return;
        };
        let mode = self.switch_modes.lock().unwrap()[switch as usize];
        self.events.lock().unwrap().push(FenceEvent {
            switch,
            action: action.to_string(),
            target: target.to_string(),
            answered: matches!(mode, SwitchMode::Working | SwitchMode::Slow(_)),
            at: Instant::now(),
        });
        match mode {
            SwitchMode::Working => {}
            SwitchMode::Refusing => {
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
            SwitchMode::Hung => {
                self.held.lock().unwrap().push(stream);
                return;
            }
            SwitchMode::Slow(delay) => {
                // In steps, so that a lab being torn down does not wait.
                let until = Instant::now() + delay;
                while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10).min(until - Instant::now()));
                }
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
            }
        }
        let node = Node::from_name(target);
        let _one_at_a_time = self.power.lock().unwrap();
        let answer = match (action, node) {
            ("monitor", _) => "OK".to_string(),
            ("list", _) => format!("OK {} {}", Node::A.name(), Node::B.name()),
            ("status", Some(n)) => {
                format!("OK {}", if self.slot(n).state.lock().unwrap().init_pid.is_some() { "on" } else { "off" })
            }
            ("off", Some(n)) => {
                self.power_off(n);
                "OK off".to_string()
            }
            ("on", Some(n)) => {
                self.power_on(n);
                "OK on".to_string()
            }
            ("reboot", Some(n)) => {
                self.power_off(n);
                self.power_on(n);
                "OK on".to_string()
            }
            _ => format!("ERR cannot {action} {target}"),
        };
        let _ = (&stream).write_all(format!("{answer}\n").as_bytes());
    }
}

/// A TCP listener bound in `ns` (a thread enters the namespace, binds and
/// exits; the socket stays in the namespace it was made in).
fn bind_in_netns(ns: &Netns, addr: &str) -> TcpListener {
    let path = ns.path();
    let addr = addr.to_string();
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a namespace file we opened; it changes only this
        // thread, which ends right after binding.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {}", path.display());
        TcpListener::bind(&addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"))
    })
    .join()
    .unwrap()
}

/// What Keel's resource agent logged, and every error line, from a node's
/// pacemaker.log (the last 60 of them), headed for a test's message.
fn agent_lines(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("keel(") || l.contains(" ERROR: ")).collect();
    let mut s = String::from("--- pacemaker.log (the agent's lines and errors) ---\n");
    for l in &lines[lines.len().saturating_sub(60)..] {
        s += l;
        s += "\n";
    }
    s
}

// ---------------------------------------------------------------------------
// crm_mon XML
// ---------------------------------------------------------------------------

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// Whether crm_mon's XML shows `name` online.
fn node_online(xml: &str, name: &str) -> bool {
    xml.match_indices("<node ").map(|(i, _)| &xml[i..i + xml[i..].find('>').unwrap_or(0)]).any(|tag| {
        attr(tag, "name") == Some(name) && attr(tag, "online") == Some("true") && attr(tag, "type").is_some()
    })
}

/// The node a primitive or group is started on (every member of a group
/// on the same node), from crm_mon's XML.
fn started_on(xml: &str, id: &str) -> Option<String> {
    let section = xml.split("<resources>").nth(1)?.split("</resources>").next()?;
    let group_open = format!("<group id=\"{id}\"");
    let body = if let Some(i) = section.find(&group_open) {
        let rest = &section[i..];
        &rest[..rest.find("</group>")?]
    } else {
        let open = format!("<resource id=\"{id}\"");
        let i = section.find(&open)?;
        let rest = &section[i..];
        if rest[..rest.find('>')?].ends_with('/') {
            // <resource .../>: on no node.
            return None;
        }
        &rest[..rest.find("</resource>")?]
    };
    let mut node = None;
    let mut members = 0;
    for (i, _) in body.match_indices("<resource ") {
        members += 1;
        let rest = &body[i..];
        let tag = &rest[..rest.find('>')?];
        if attr(tag, "role") != Some("Started") || attr(tag, "failed") != Some("false") {
            return None;
        }
        if attr(tag, "nodes_running_on") != Some("1") {
            return None;
        }
        let n = rest.find("<node ").map(|j| &rest[j..])?;
        let here = attr(&n[..n.find('>')?], "name")?.to_string();
        if node.get_or_insert_with(|| here.clone()) != &here {
            return None;
        }
    }
    if members == 0 { None } else { node }
}

// ---------------------------------------------------------------------------
// Freezer cgroup and loop devices
// ---------------------------------------------------------------------------

/// A freezer cgroup (v1 `freezer` hierarchy, or v2 `cgroup.freeze`).
struct Freezer {
    path: PathBuf,
    v2: bool,
}

impl Freezer {
    fn new(name: &str) -> Self {
        let v1 = Path::new("/sys/fs/cgroup/freezer");
        let (root, v2) = if v1.join("cgroup.procs").exists() {
            (v1.to_path_buf(), false)
        } else {
            (PathBuf::from("/sys/fs/cgroup"), true)
        };
        let path = root.join(name);
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("cgroup {}: {e}", path.display()));
        Freezer { path, v2 }
    }

    fn procs_file_cstring(&self) -> std::ffi::CString {
        std::ffi::CString::new(self.path.join("cgroup.procs").to_str().unwrap()).unwrap()
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Freezes or thaws, and waits (bounded) until done.
    fn freeze(&self, frozen: bool) {
        let (file, value) = if self.v2 {
            ("cgroup.freeze", if frozen { "1" } else { "0" })
        } else {
            ("freezer.state", if frozen { "FROZEN" } else { "THAWED" })
        };
        if std::fs::write(self.path.join(file), value).is_err() {
            return;
        }
        let done = wait_for(Duration::from_secs(10), || {
            let state = if self.v2 {
                let events = std::fs::read_to_string(self.path.join("cgroup.events")).ok()?;
                events.lines().find(|l| l.starts_with("frozen "))?.ends_with(if frozen { "1" } else { "0" })
            } else {
                std::fs::read_to_string(self.path.join("freezer.state")).ok()?.trim() == value
            };
            state.then_some(())
        });
        assert!(done.is_some(), "cgroup {} did not reach {value}", self.path.display());
    }

    fn remove(&self) {
        let _ = wait_for(Duration::from_secs(5), || std::fs::remove_dir(&self.path).ok());
    }
}

/// `losetup -d`, bounded and without panicking (it runs in Drop).
fn detach_loop(dev: &str) {
    let child = Command::new("losetup").arg("-d").arg(dev).stdin(Stdio::null()).stderr(Stdio::null()).spawn();
    match child {
        Ok(mut child) => {
            if wait_timeout(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = wait_timeout(&mut child, Duration::from_secs(5));
                eprintln!("ha lab: losetup -d {dev} did not finish");
            }
        }
        Err(e) => eprintln!("ha lab: losetup -d {dev}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_keep_the_agents_lines_however_old() {
        let mut log = String::from("Nov 24 13:48:29  keel(nfs-keel)[669]:    ERROR: keel serve exited at start\n");
        log += "Nov 24 13:48:29 node-a pacemaker-controld  [1]: error: Result of start operation: error\n";
        for i in 0..500 {
            log += &format!("Nov 24 13:48:30 node-a pacemaker-based [1]: info: line {i}\n");
        }
        log += "Nov 24 13:48:31  keel(nfs-keel)[700]:    INFO: keel serving /etc/keel/nfs.toml (pid 701)\n";
        let got = agent_lines(&log);
        let lines: Vec<&str> = got.lines().skip(1).collect();
        assert_eq!(lines.len(), 2, "{got}");
        assert!(lines[0].contains("exited at start"));
        assert!(lines[1].contains("keel serving"));
        assert!(!got.contains("line 499"));
    }
}
