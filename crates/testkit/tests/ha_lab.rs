//! The HA lab proves itself with stock agents: a group [Filesystem on the
//! shared disk, IPaddr2 floating IP, Dummy] on node A, both power switches
//! as stonith devices in a two-level fencing topology, and a fault per
//! case. Each case prints how long the group took to be started on B
//! after the fault. Root only; skipped (with a message) where Corosync or
//! Pacemaker are not installed. Cases run one at a time (two clusters on
//! two cores would measure each other).
//!
//! Ignored by default: CI runs the same faults through Keel (keel's
//! `ha_failover`). Run these with `cargo test -p keel-testkit --test
//! ha_lab -- --ignored` after changing the lab.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_testkit::ha::{self, FENCING_CRM, FLOATING_IP, HaConfig, HaLab, Node, Switch};

const GROUP: &str = "keel";
/// The bound on each failover.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn skip() -> bool {
    if let Some(why) = ha::unavailable() {
        eprintln!("skipped: {why}");
        return true;
    }
    false
}

/// A lab running the group on A, with a file written to the shared disk
/// through A.
fn lab_with_group(cfg: HaConfig) -> HaLab {
    let t0 = Instant::now();
    let lab = HaLab::start(cfg);
    let online = t0.elapsed();
    lab.configure(
        Node::A,
        &format!(
            "{FENCING_CRM}\
             property stonith-action=off\n\
             rsc_defaults resource-stickiness=100\n\
             primitive fs ocf:heartbeat:Filesystem params device={disk} directory=/srv/keel fstype=xfs \
             op monitor interval=5s OCF_CHECK_LEVEL=20\n\
             primitive vip ocf:heartbeat:IPaddr2 params ip={FLOATING_IP} cidr_netmask=24 nic={nic} \
             op monitor interval=10s\n\
             primitive svc ocf:heartbeat:Dummy op monitor interval=10s\n\
             group {GROUP} fs vip svc\n\
             location {GROUP}-prefers-a {GROUP} 50: keel-ha-a\n",
            disk = ha::SHARED_DISK,
            nic = ha::PUBLIC_NIC,
        ),
    );
    lab.wait_until_running_on(GROUP, Node::A, Duration::from_secs(60));
    lab.run_ok(Node::A, &["sh", "-c", "echo written-on-a > /srv/keel/proof && sync"]);
    assert!(client_reaches_floating_ip(&lab), "the client cannot reach {FLOATING_IP}");
    eprintln!("ha_lab: cluster online {online:.1?}, group started on A {:.1?} after the start", t0.elapsed());
    lab
}

fn client_reaches_floating_ip(lab: &HaLab) -> bool {
    lab.client().run(&["ping", "-c", "1", "-W", "2", FLOATING_IP]).status.success()
}

/// The group on B, with A's file on the shared disk and the floating IP
/// answering.
fn assert_served_by_b(lab: &HaLab) {
    let proof = lab.run(Node::B, &["cat", "/srv/keel/proof"]);
    assert_eq!(proof.stdout.trim(), "written-on-a", "the shared disk on B:\n{}", proof.text());
    assert!(client_reaches_floating_ip(lab), "the client cannot reach {FLOATING_IP} on B");
}

/// Injects `fault` and waits for the group on B, checking it is served
/// there: how long that took.
fn moved_to_b_after(lab: &HaLab, fault: impl FnOnce(&HaLab)) -> Duration {
    let t = Instant::now();
    fault(lab);
    lab.wait_until_running_on(GROUP, Node::B, FAILOVER_TIMEOUT);
    let took = t.elapsed();
    assert_served_by_b(lab);
    took
}

/// The power actions the switches carried out on `node`, as (switch,
/// action, answered).
fn actions_on(lab: &HaLab, node: Node) -> Vec<(Switch, String, bool)> {
    lab.power_actions(node).into_iter().map(|e| (e.switch, e.action, e.answered)).collect()
}

fn crash_failover(token_ms: u32) {
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = lab_with_group(HaConfig { token_ms, ..HaConfig::default() });
    let took = moved_to_b_after(&lab, |lab| lab.crash(Node::A));
    let actions = actions_on(&lab, Node::A);
    assert!(actions.contains(&(Switch::Ipmi, "off".into(), true)), "A was not fenced through level 1: {actions:?}");
    assert!(actions_on(&lab, Node::B).is_empty(), "B was fenced: {:?}", actions_on(&lab, Node::B));
    eprintln!("ha_lab: crash of A, token {token_ms} ms: group started on B {took:.1?} after the fault");
}

#[test]
#[ignore = "see the module doc"]
fn crash_of_the_active_node_moves_the_group() {
    if skip() {
        return;
    }
    crash_failover(2000);
}

/// The same with a shorter and a longer token, for the timings.
#[test]
#[ignore = "see the module doc"]
fn crash_failover_time_by_token_timeout() {
    if skip() {
        return;
    }
    for token_ms in [1000, 3000] {
        crash_failover(token_ms);
    }
}

#[test]
#[ignore = "see the module doc"]
fn heartbeat_link_loss_on_the_active_node_fences_it() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = lab_with_group(HaConfig::default());
    let took = moved_to_b_after(&lab, |lab| lab.heartbeat_link_down(Node::A));
    // A lost its way to the switches with its heartbeat link: B won.
    let actions = actions_on(&lab, Node::A);
    assert!(actions.contains(&(Switch::Ipmi, "off".into(), true)), "A was not fenced through level 1: {actions:?}");
    assert!(!lab.is_powered(Node::A), "A is still on");
    assert!(actions_on(&lab, Node::B).is_empty(), "B was fenced: {:?}", actions_on(&lab, Node::B));
    eprintln!("ha_lab: heartbeat link loss on A, token 2000 ms: group started on B {took:.1?} after the fault");
}

#[test]
#[ignore = "see the module doc"]
fn failed_level_one_switch_falls_back_to_level_two() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = lab_with_group(HaConfig::default());
    lab.fence_device_failure(Switch::Ipmi);
    let took = moved_to_b_after(&lab, |lab| lab.crash(Node::A));
    let actions = actions_on(&lab, Node::A);
    let tried_ipmi = actions.iter().position(|a| a == &(Switch::Ipmi, "off".into(), false));
    let used_pdu = actions.iter().position(|a| a == &(Switch::Pdu, "off".into(), true));
    assert!(
        matches!((tried_ipmi, used_pdu), (Some(i), Some(p)) if i < p),
        "expected level 1 (ipmi) to fail, then level 2 (pdu) to power A off: {actions:?}"
    );
    eprintln!(
        "ha_lab: level 1 switch failed + crash of A, token 2000 ms: group started on B {took:.1?} after the fault"
    );
}

#[test]
#[ignore = "see the module doc"]
fn frozen_active_node_is_fenced() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = lab_with_group(HaConfig::default());
    let took = moved_to_b_after(&lab, |lab| {
        lab.hang(Node::A);
        // The trap: a frozen node's kernel still answers for its addresses.
        assert!(client_reaches_floating_ip(lab), "frozen A's kernel does not answer for {FLOATING_IP}");
    });
    let actions = actions_on(&lab, Node::A);
    assert!(actions.contains(&(Switch::Ipmi, "off".into(), true)), "A was not fenced through level 1: {actions:?}");
    eprintln!("ha_lab: hang of A, token 2000 ms: group started on B {took:.1?} after the fault");
}

/// The heartbeat switch fails: the nodes lose each other and the power
/// switches, which are on the heartbeat network (as the NSS7.0-HA paper's fence
/// devices are on its private network). Neither can fence the other, so
/// B must not start the group, and A keeps serving it.
#[test]
#[ignore = "see the module doc"]
fn heartbeat_switch_failure_leaves_the_group_on_the_active_node() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = lab_with_group(HaConfig::default());
    lab.heartbeat_switch_down();
    // Token (2 s) + consensus (2.4 s) + a few fencing attempts, each
    // failing within the agent's 5 s.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(20) {
        assert_ne!(lab.where_is_seen_by(Node::B, GROUP), Some(Node::B), "B started the group unfenced");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(lab.where_is_seen_by(Node::A, GROUP), Some(Node::A), "A lost the group:\n{}", lab.diagnostics());
    assert!(client_reaches_floating_ip(&lab), "the client cannot reach {FLOATING_IP} on A");
    let b_view = lab.status(Node::B);
    assert!(b_view.contains("UNCLEAN") || b_view.contains("OFFLINE"), "B does not see A as lost:\n{b_view}");
    for node in Node::ALL {
        assert!(actions_on(&lab, node).is_empty(), "a switch was reached: {:?}", lab.fence_events());
    }
    assert!(lab.is_powered(Node::A) && lab.is_powered(Node::B));
    eprintln!("ha_lab: heartbeat switch failure: group stays on A, no node fenced (20 s watched)");
}

/// A's path to the shared disk dies: the file system's monitor (which
/// writes, OCF_CHECK_LEVEL=20) fails, it cannot be mounted on A again, and
/// the group moves to B, fenced or not.
#[test]
#[ignore = "see the module doc"]
fn storage_path_loss_on_the_active_node_moves_the_group() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = lab_with_group(HaConfig::default());
    let took = moved_to_b_after(&lab, |lab| lab.storage_path_loss(Node::A));
    let fenced = !actions_on(&lab, Node::A).is_empty();
    eprintln!(
        "ha_lab: storage path loss on A (fs monitor every 5 s): group started on B {took:.1?} after the fault \
         (A fenced: {fenced})"
    );
}
