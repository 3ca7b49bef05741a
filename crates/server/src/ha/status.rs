//! `keel ha status`: what an administrator wants at 3 a.m., from
//! Pacemaker's own view (`crm_mon --output-as=xml`) and the history the
//! OCF agent keeps in the CIB: which node serves which service and since
//! when, the nodes and their state, the last failover and why, fencing.

use std::fmt::Write as _;
use std::process::Command;

use anyhow::{Context, bail};
use serde::Serialize;

/// Everything printed, also as JSON (`--json`).
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct HaStatus {
    pub nodes: Vec<NodeState>,
    pub services: Vec<ServiceState>,
    /// Newest first, as crm_mon lists them (one in progress before all).
    pub fencing: Vec<FenceEvent>,
    /// Resource operations that failed (Pacemaker's "failed resource
    /// actions"): why a service moved.
    pub failures: Vec<Failure>,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct NodeState {
    pub name: String,
    /// online, standby, OFFLINE, UNCLEAN (to be fenced), ...
    pub state: String,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct ServiceState {
    /// The group's name (a `[[service]]` of the plan).
    pub name: String,
    /// Where its Keel server runs, if it runs.
    pub node: Option<String>,
    /// Unix time its server last became healthy, from the agent's record.
    pub since: Option<u64>,
    /// The node that served it before, and when that activation began.
    pub previous: Option<(String, u64)>,
    /// Served by a node whose start the agent has not recorded yet.
    pub unrecorded: bool,
    /// A member that is failed, blocked or unmanaged, and how.
    pub problems: Vec<String>,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct FenceEvent {
    pub target: String,
    pub action: String,
    pub status: String,
    /// The node that fenced.
    pub by: String,
    pub completed: String,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Failure {
    pub operation: String,
    pub node: String,
    pub status: String,
    pub when: String,
}

/// Runs crm_mon and cibadmin and reads their answers.
pub fn gather() -> anyhow::Result<HaStatus> {
    let mon = run(Command::new("crm_mon").args(["--one-shot", "--output-as=xml", "--inactive", "--fence-history=2"]))?;
    let cib = run(Command::new("cibadmin").args(["--query", "--scope", "crm_config"]))?;
    parse(&mon, &cib)
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {name}: is Pacemaker installed (crm_mon and cibadmin come with it)?"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said = if stderr.trim().is_empty() { String::new() } else { format!(": {}", stderr.trim()) };
        bail!("{name} failed ({}){said}; is the cluster running on this node (corosync and pacemaker)?", out.status);
    }
    String::from_utf8(out.stdout).context("crm_mon's answer is not UTF-8")
}

/// The agent's records: `keel-<resource>-active` = "NODE UNIXTIME".
fn history(cib: &roxmltree::Document, resource: &str, what: &str) -> Option<(String, u64)> {
    let name = format!("keel-{resource}-{what}");
    let value = cib
        .descendants()
        .filter(|n| n.has_tag_name("nvpair"))
        .find(|n| n.attribute("name") == Some(name.as_str()))?
        .attribute("value")?;
    let (node, t) = value.split_once(' ')?;
    Some((node.to_string(), t.trim().parse().ok()?))
}

pub fn parse(mon: &str, cib: &str) -> anyhow::Result<HaStatus> {
    let mon = roxmltree::Document::parse(mon).context("crm_mon's XML")?;
    let cib = roxmltree::Document::parse(cib).context("cibadmin's XML")?;
    let mut st = HaStatus::default();
    let attr = |n: &roxmltree::Node, a: &str| n.attribute(a).unwrap_or("").to_string();
    let yes = |n: &roxmltree::Node, a: &str| n.attribute(a) == Some("true");

    for n in mon.descendants().filter(|n| n.has_tag_name("node") && n.parent().is_some_and(|p| p.has_tag_name("nodes")))
    {
        let state = if yes(&n, "unclean") {
            "UNCLEAN (to be fenced)"
        } else if !yes(&n, "online") {
            "OFFLINE"
        } else if yes(&n, "standby") {
            "standby"
        } else if yes(&n, "maintenance") {
            "maintenance"
        } else {
            "online"
        };
        st.nodes.push(NodeState { name: attr(&n, "name"), state: state.into() });
    }

    // A service is a group with an ocf:keel:keel member.
    for g in mon.descendants().filter(|n| n.has_tag_name("group")) {
        let members: Vec<_> = g.children().filter(|c| c.has_tag_name("resource")).collect();
        let Some(keel) = members.iter().find(|m| m.attribute("resource_agent") == Some("ocf:keel:keel")) else {
            continue;
        };
        let running_on = |r: &roxmltree::Node| {
            r.children().find(|c| c.has_tag_name("node")).and_then(|c| c.attribute("name")).map(str::to_string)
        };
        let node = if yes(keel, "active") && attr(keel, "role") == "Started" { running_on(keel) } else { None };
        let keel_id = attr(keel, "id");
        let mut svc = ServiceState { name: attr(&g, "id"), node: node.clone(), ..Default::default() };
        svc.previous = history(&cib, &keel_id, "previous");
        match history(&cib, &keel_id, "active") {
            Some((at, since)) if Some(&at) == node.as_ref() => svc.since = Some(since),
            // The agent records a start once the floating address is up
            // on the new node (a monitor interval later at most): until
            // then the last record is the node that served before.
            Some(record) if node.is_some() => {
                svc.previous = Some(record);
                svc.unrecorded = true;
            }
            _ => {}
        }
        for m in &members {
            let mut bad = Vec::new();
            for (a, what) in [("failed", "failed"), ("blocked", "blocked"), ("orphaned", "orphaned")] {
                if yes(m, a) {
                    bad.push(what);
                }
            }
            if m.attribute("managed") == Some("false") {
                bad.push("unmanaged");
            }
            if !bad.is_empty() {
                svc.problems.push(format!("{} {}", attr(m, "id"), bad.join(", ")));
            }
        }
        st.services.push(svc);
    }

    for e in mon.descendants().filter(|n| n.has_tag_name("fence_event")) {
        st.fencing.push(FenceEvent {
            target: attr(&e, "target"),
            action: attr(&e, "action"),
            status: attr(&e, "status"),
            by: attr(&e, "delegate"),
            completed: e.attribute("completed").or(e.attribute("last-failed")).unwrap_or("").to_string(),
        });
    }
    for f in mon.descendants().filter(|n| n.has_tag_name("failure")) {
        let reason = match f.attribute("exitreason").filter(|r| !r.is_empty()) {
            Some(r) => format!("{} ({r})", attr(&f, "exitstatus")),
            None => attr(&f, "exitstatus"),
        };
        st.failures.push(Failure {
            operation: attr(&f, "op_key"),
            node: attr(&f, "node"),
            status: reason,
            when: attr(&f, "last-rc-change"),
        });
    }
    Ok(st)
}

fn ago(now: u64, t: u64) -> String {
    let s = now.saturating_sub(t);
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min ago", s / 60),
        7200..172_800 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// The text an administrator reads.
pub fn render(st: &HaStatus, now: u64) -> String {
    let mut out = String::new();
    let nodes: Vec<String> = st.nodes.iter().map(|n| format!("{} {}", n.name, n.state)).collect();
    let _ = writeln!(out, "nodes: {}", if nodes.is_empty() { "none known".into() } else { nodes.join(", ") });
    if st.services.is_empty() {
        let _ = writeln!(out, "services: none (no group with an ocf:keel:keel resource; see keel ha init)");
    }
    for s in &st.services {
        let mut line = match (&s.node, s.since) {
            (Some(n), Some(t)) => format!("service {}: served by {n} since {}", s.name, ago(now, t)),
            (Some(n), None) if s.unrecorded => format!("service {}: served by {n} (start not recorded yet)", s.name),
            (Some(n), None) => format!("service {}: served by {n}", s.name),
            (None, _) => format!("service {}: NOT SERVED", s.name),
        };
        if let Some((p, t)) = &s.previous
            && Some(p) != s.node.as_ref()
        {
            let _ = write!(line, "; before that by {p} (from {})", ago(now, *t));
        }
        let _ = writeln!(out, "{line}");
        for p in &s.problems {
            let _ = writeln!(out, "  problem: {p}");
        }
    }
    match st.fencing.first() {
        Some(f) => {
            let _ =
                writeln!(out, "last fencing: {} of {} by {}: {} {}", f.action, f.target, f.by, f.status, f.completed);
        }
        None => {
            let _ = writeln!(out, "last fencing: none recorded");
        }
    }
    if st.failures.is_empty() {
        let _ = writeln!(out, "failed actions: none");
    }
    for f in &st.failures {
        let _ = writeln!(out, "failed action: {} on {}: {} at {}", f.operation, f.node, f.status, f.when);
    }
    out
}

/// Whether everything is served and nothing waits to be fenced: `keel ha
/// status` exits 1 otherwise, for scripts.
pub fn healthy(st: &HaStatus) -> bool {
    !st.services.is_empty()
        && st.services.iter().all(|s| s.node.is_some() && s.problems.is_empty())
        && !st.nodes.iter().any(|n| n.state.starts_with("UNCLEAN"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MON: &str = r#"<pacemaker-result api-version="2.25" request="crm_mon --output-as=xml">
  <nodes>
    <node name="nss-a" id="1" online="false" standby="false" maintenance="false" unclean="false" type="member"/>
    <node name="nss-b" id="2" online="true" standby="false" maintenance="false" unclean="false" type="member"/>
  </nodes>
  <resources>
    <resource id="fence-nss-a-1" resource_agent="stonith:fence_ipmilan" role="Started" active="true" failed="false" blocked="false" managed="true" orphaned="false">
      <node name="nss-b" id="2" cached="true"/>
    </resource>
    <group id="home" number_resources="3">
      <resource id="home-fs" resource_agent="ocf:heartbeat:Filesystem" role="Started" active="true" failed="false" blocked="false" managed="true" orphaned="false"><node name="nss-b" id="2" cached="true"/></resource>
      <resource id="home-ip" resource_agent="ocf:heartbeat:IPaddr2" role="Started" active="true" failed="false" blocked="false" managed="true" orphaned="false"><node name="nss-b" id="2" cached="true"/></resource>
      <resource id="home-keel" resource_agent="ocf:keel:keel" role="Started" active="true" failed="false" blocked="false" managed="true" orphaned="false"><node name="nss-b" id="2" cached="true"/></resource>
    </group>
    <group id="scratch" number_resources="2">
      <resource id="scratch-fs" resource_agent="ocf:heartbeat:Filesystem" role="Stopped" active="false" failed="true" blocked="true" managed="true" orphaned="false"/>
      <resource id="scratch-keel" resource_agent="ocf:keel:keel" role="Stopped" active="false" failed="false" blocked="false" managed="true" orphaned="false"/>
    </group>
  </resources>
  <failures>
    <failure op_key="home-keel_monitor_2000" node="nss-a" exitstatus="error" exitreason="keel does not answer NFS" exitcode="1" call="12" status="complete" last-rc-change="2026-11-24 10:00:00 +00:00" task="monitor"/>
  </failures>
  <fence_history>
    <fence_event action="reboot" target="nss-a" delegate="nss-b" client="pacemaker-controld.1" origin="nss-b" status="success" completed="2026-11-24 10:00:02.5 +00:00"/>
  </fence_history>
  <status code="0" message="OK"/>
</pacemaker-result>"#;

    const CIB: &str = r#"<crm_config>
  <cluster_property_set id="cib-bootstrap-options"><nvpair id="a" name="stonith-enabled" value="true"/></cluster_property_set>
  <cluster_property_set id="keel-history">
    <nvpair id="b" name="keel-home-keel-active" value="nss-b 1000"/>
    <nvpair id="c" name="keel-home-keel-previous" value="nss-a 400"/>
  </cluster_property_set>
</crm_config>"#;

    #[test]
    fn a_failover_reads_as_who_serves_since_when_and_why() {
        let st = parse(MON, CIB).unwrap();
        assert_eq!(st.nodes.iter().map(|n| n.state.as_str()).collect::<Vec<_>>(), ["OFFLINE", "online"]);
        assert_eq!(st.services.len(), 2);
        let home = &st.services[0];
        assert_eq!((home.node.as_deref(), home.since), (Some("nss-b"), Some(1000)));
        assert_eq!(home.previous, Some(("nss-a".to_string(), 400)));
        assert_eq!(st.services[1].node, None);
        assert_eq!(st.services[1].problems, ["scratch-fs failed, blocked"]);
        assert!(!healthy(&st));
        let text = render(&st, 1090);
        assert!(
            text.contains("service home: served by nss-b since 90 s ago; before that by nss-a (from 11 min ago)"),
            "{text}"
        );
        assert!(text.contains("service scratch: NOT SERVED"), "{text}");
        assert!(text.contains("last fencing: reboot of nss-a by nss-b: success"), "{text}");
        assert!(text.contains("home-keel_monitor_2000 on nss-a: error (keel does not answer NFS)"), "{text}");
    }

    /// Right after a failover, before the agent on the new node has
    /// recorded its start (it waits for the floating address), the last
    /// record is the node that served before: shown as such, not as a
    /// "since" of the new node and not with the record before it.
    #[test]
    fn a_record_of_another_node_is_not_a_since() {
        let cib = CIB.replace("nss-b 1000", "nss-a 1000").replace("nss-a 400", "nss-b 300");
        let st = parse(MON, &cib).unwrap();
        assert_eq!(st.services[0].since, None);
        assert_eq!(st.services[0].previous, Some(("nss-a".to_string(), 1000)));
        let text = render(&st, 1090);
        assert!(
            text.contains(
                "service home: served by nss-b (start not recorded yet); before that by nss-a (from 90 s ago)"
            ),
            "{text}"
        );
    }

    /// crm_mon's answer in the lab after two failovers, each fencing
    /// keel-ha-a (tests/ha_failover.rs, primary_fence_device_hung, two
    /// trials): it lists the newest fencing first.
    const MON_TWO_FENCINGS: &str = include_str!("testdata/crm_mon-two-fencings.xml");

    #[test]
    fn the_last_fencing_is_the_newest_one() {
        let st = parse(MON_TWO_FENCINGS, CIB).unwrap();
        let completed: Vec<&str> = st.fencing.iter().map(|f| f.completed.as_str()).collect();
        assert_eq!(completed, ["2026-11-27 03:48:13Z", "2026-11-27 03:47:35Z"]);
        let text = render(&st, 0);
        assert!(text.contains("last fencing: off of keel-ha-a by keel-ha-b: success 2026-11-27 03:48:13Z"), "{text}");
        assert!(text.contains("nodes: keel-ha-a OFFLINE, keel-ha-b online"), "{text}");
        assert!(text.contains("service nfs: served by keel-ha-b"), "{text}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse("<not closed", CIB).is_err());
        assert!(parse(MON, "").is_err());
    }
}
