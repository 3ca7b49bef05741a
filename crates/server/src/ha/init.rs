//! `keel ha init PLAN --out DIR`: from a short description of the pair
//! (nodes, fence devices, shared storage, floating addresses), the files
//! NSS-HA's `cluster_config.sh` produced: `corosync.conf`, a crmsh script
//! with every Pacemaker resource, constraint and the fencing topology, and
//! one Keel configuration per service. It runs nothing: it prints the
//! commands that install them, for the administrator to read first.
//!
//! Each service's shared file system holds Keel's state in `.keel` and
//! the export beside it (`export/` by default): the state moves with the
//! service, and no client of the export can reach the handle key.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

/// The plan, as the administrator writes it (see `contrib/ha/keel-ha.example.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    #[serde(default = "default_cluster_name")]
    pub cluster_name: String,
    /// Corosync's token timeout: how long a silent node takes to be
    /// declared lost, the largest part of a failover.
    #[serde(default = "default_token_ms")]
    pub token_ms: u32,
    /// Corosync's consensus timeout, which follows the token's before the
    /// survivor acts; unset, Corosync's 1.2 times the token. The trade-off
    /// is in `contrib/ha/keel-ha.example.toml`.
    pub consensus_ms: Option<u32>,
    /// How often Pacemaker asks each resource whether it is healthy.
    #[serde(default = "default_monitor_seconds")]
    pub monitor_seconds: u32,
    /// What fencing does to a node (Pacemaker's `stonith-action`), and so
    /// the action the level-1 timeout is set for.
    #[serde(default)]
    pub fence_action: FenceAction,
    /// How long Pacemaker waits for a node's level-1 device before it
    /// gives up on it and tries level 2 (one try). Only where a level 2
    /// follows. The trade-off is in `contrib/ha/keel-ha.example.toml`.
    #[serde(default = "default_fence_level1_timeout")]
    pub fence_level1_timeout_seconds: WholeSeconds,
    /// Pacemaker's `priority-fencing-delay`: how long a node waits before
    /// it fences a lost peer that runs the services (0: not at all). When
    /// both nodes lose each other at once and both fence, the one serving
    /// wins; every failover from a fenced serving node waits it. The
    /// trade-off is in `contrib/ha/keel-ha.example.toml`.
    #[serde(default = "default_priority_fencing_delay")]
    pub priority_fencing_delay_seconds: WholeSeconds,
    /// Hosts on the public network the active node must reach (a gateway,
    /// a switch): losing them all moves the services (ocf:pacemaker:ping).
    #[serde(default)]
    pub ping: Vec<IpAddr>,
    /// The keel program, where it is not `keel` on the PATH.
    pub keel_binary: Option<PathBuf>,
    pub node: Vec<Node>,
    pub service: Vec<Service>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// As `uname -n` prints it.
    pub name: String,
    /// On the private (heartbeat) network.
    pub heartbeat: IpAddr,
    /// A second Corosync link (the public network), if wanted.
    pub heartbeat2: Option<IpAddr>,
    /// Level 1 first (the server's management controller), then level 2
    /// (a switched PDU): Pacemaker tries level 2 when level 1 fails.
    pub fence: Vec<FenceDevice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceDevice {
    /// A fence agent (`stonith_admin --list-installed`), e.g. fence_ipmilan.
    pub agent: String,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Names the Pacemaker resources and the Keel configuration file.
    pub name: String,
    /// The floating address clients mount, with its prefix: 10.1.0.100/24.
    pub address: String,
    /// The network interface for the address (default: the one whose
    /// network holds it).
    pub nic: Option<String>,
    /// The shared block device (a /dev/disk/by-uuid or by-id name, the same
    /// on both nodes).
    pub device: PathBuf,
    /// Where the shared file system is mounted. Keel's state goes in
    /// `.keel` under it, beside the export, never inside it.
    pub mount: PathBuf,
    /// The directory clients mount, relative to `mount`.
    #[serde(default = "default_export")]
    pub export: PathBuf,
    #[serde(default = "default_fstype")]
    pub fstype: String,
    /// The node that runs it when both are up (active/active: one service
    /// prefers each node). Without one, it stays where it runs.
    pub prefer: Option<String>,
    /// Who may mount the export: the service address's network by default.
    pub clients: Option<Vec<String>>,
}

/// Pacemaker's `stonith-action`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FenceAction {
    /// The node stays off until someone powers it on. Keel's default: one
    /// power command, confirmed by the device's status, so a short
    /// level-1 timeout fits it; and a node that failed does not come back
    /// and take its service back before anyone has looked.
    #[default]
    Off,
    /// Pacemaker's own default: the node is powered off, then on again,
    /// and rejoins. The agent answers only once the node is on again
    /// (fence_ipmilan: off, 2 s, on), so the failover waits for that too.
    Reboot,
}

impl FenceAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FenceAction::Reboot => "reboot",
            FenceAction::Off => "off",
        }
    }
}

/// A duration in whole seconds. Pacemaker 2.1.5 reads a fence device's
/// `pcmk_*_timeout` in whole seconds only ("1500ms" becomes 1500 s), so a
/// fraction or a string with a unit is refused rather than rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WholeSeconds(pub u32);

impl<'de> Deserialize<'de> for WholeSeconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        const WHY: &str = "Pacemaker 2.1.5 reads fence timeouts in whole seconds only: \"1500ms\" would be 1500 s";
        fn refuse<E: serde::de::Error>(v: impl std::fmt::Display) -> E {
            E::custom(format!("{v}: give a whole number of seconds, as 2 ({WHY})"))
        }
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WholeSeconds;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a whole number of seconds ({WHY})")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<WholeSeconds, E> {
                u32::try_from(v).map(WholeSeconds).map_err(|_| refuse(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<WholeSeconds, E> {
                u32::try_from(v).map(WholeSeconds).map_err(|_| refuse(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<WholeSeconds, E> {
                Err(refuse(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WholeSeconds, E> {
                Err(refuse(format!("{v:?}")))
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn default_cluster_name() -> String {
    "keel".into()
}
/// RHEL 7's pcs default; what the lab measures failover under 5 s with.
fn default_token_ms() -> u32 {
    1000
}
fn default_monitor_seconds() -> u32 {
    2
}
fn default_fstype() -> String {
    "xfs".into()
}
/// Twice what a level-1 device that powers a node off within a second
/// needs; a dead one then costs 2 s before level 2 (see the example plan).
fn default_fence_level1_timeout() -> WholeSeconds {
    WholeSeconds(2)
}
/// None: every failover from a fenced node would wait it, and more (the
/// fencer's whole-second timer: 1 s cost 1.2-1.7 s in the lab), which puts
/// a level-1 device that takes a second, or one that is dead, past the 5 s
/// goal (5.1-5.6 s and 7.0-7.1 s in the lab, against 4.0 and 4.9 s). A
/// site that would rather have the serving node win a fencing race sets
/// it (1 s: longer than a live level-1 device takes to power the other
/// node off).
fn default_priority_fencing_delay() -> WholeSeconds {
    WholeSeconds(0)
}
fn default_export() -> PathBuf {
    PathBuf::from("export")
}

/// The shortest consensus the plan takes: above Corosync's join timeout
/// (50 ms), which corosync.conf(5) asks of a two-node cluster's.
const CONSENSUS_MS_MIN: u32 = 100;

/// The longest `priority_fencing_delay_seconds`: every failover from a
/// fenced node waits it, and a crash already takes about 3 s of the 5 s goal.
const PRIORITY_FENCING_DELAY_MAX_SECONDS: u32 = 10;

/// Keel's state directory, under a service's mount point: beside the
/// export, so no client can LOOKUP and READ the handle key.
const STATE_DIR_NAME: &str = ".keel";
/// Pacemaker's `transition-delay`: how long the controller waits after the
/// last event (each one restarts the wait) before it reads the CIB and
/// computes what to do. Pacemaker 2.1.5's controller, when it is the DC
/// and loses its peer, reads the CIB at once, while its own updates of the
/// peer's state are still on their way; finding them pending, it sleeps a
/// whole second before it reads again (`do_pe_invoke_callback`). In the
/// lab they land within 20 ms. The price: every transition starts this
/// much later, each failover's included (docs/ha.md, "Where a failover's
/// time goes"); a wait too short for a slow machine costs the second, as
/// without it.
const TRANSITION_DELAY_MS: u32 = 50;
/// Pacemaker's `stonith-timeout` in the generated configuration: how long
/// one fencing may take, every level included.
const STONITH_TIMEOUT_SECONDS: u32 = 30;
/// The longest level-1 timeout: two thirds of stonith-timeout, which
/// leaves level 2 the rest.
const FENCE_LEVEL1_TIMEOUT_MAX_SECONDS: u32 = STONITH_TIMEOUT_SECONDS * 2 / 3;
/// The fence device parameters `keel ha init` sets on level 1 from the
/// plan: both actions, since a reboot may be carried out as off then on.
const LEVEL1_PARAMS: [&str; 4] = ["pcmk_reboot_timeout", "pcmk_reboot_retries", "pcmk_off_timeout", "pcmk_off_retries"];

/// Where a service's Keel keeps its state, and the directory it exports.
pub fn layout(s: &Service) -> (PathBuf, PathBuf) {
    (s.mount.join(STATE_DIR_NAME), s.mount.join(&s.export))
}

/// Refuses an export that is not a plain directory under the mount point
/// or that would hold Keel's state (or lie inside it): a client of the
/// export could then read the handle key and forge handles.
fn check_layout(s: &Service) -> anyhow::Result<()> {
    let plain =
        !s.export.as_os_str().is_empty() && s.export.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain {
        bail!(
            "service {}: export = {:?}: give a directory under mount ({}) as a relative path without \
             '..' or '.', as export = \"export\"",
            s.name,
            s.export.display().to_string(),
            s.mount.display()
        );
    }
    let (state, export) = layout(s);
    if state.starts_with(&export) || export.starts_with(&state) {
        bail!(
            "service {}: export {} and Keel's state {} overlap: a client of the export could read the handle \
             key; export a directory beside {STATE_DIR_NAME}",
            s.name,
            export.display(),
            state.display()
        );
    }
    Ok(())
}

/// Where the generated Keel configuration of a service is installed on
/// both nodes: node-local, so that a probe on the passive node (where the
/// shared file system is not mounted) still finds it.
pub fn keel_config_path(service: &str) -> PathBuf {
    PathBuf::from(format!("/etc/keel/{service}.toml"))
}

/// Resource names are XML ids: letters, digits, `-`, `_` and `.`,
/// starting with a letter.
fn check_id(what: &str, s: &str) -> anyhow::Result<()> {
    let ok = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        bail!("{what} {s:?}: use letters, digits, '-', '_' and '.', starting with a letter");
    }
    Ok(())
}

/// A value for a crmsh `params` line: quoted, and refused if a quote or a
/// newline would let it end the line early.
fn crm_value(v: &str) -> anyhow::Result<String> {
    if v.contains(['"', '\n', '\\']) {
        bail!("value {v:?} contains a quote, a backslash or a newline");
    }
    Ok(format!("\"{v}\""))
}

fn split_address(a: &str) -> anyhow::Result<(IpAddr, u8)> {
    let (ip, prefix) =
        a.split_once('/').with_context(|| format!("address {a:?}: write it with its prefix, as 10.1.0.100/24"))?;
    let ip: IpAddr = ip.parse().with_context(|| format!("address {a:?}: {ip:?} is not an IP address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).with_context(|| format!("address {a:?}: bad prefix"))?;
    Ok((ip, prefix))
}

/// The network of `ip/prefix`, as an exports(5)-style client entry.
fn network_of(ip: IpAddr, prefix: u8) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            format!("{}/{prefix}", std::net::Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            format!("{}/{prefix}", std::net::Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

impl Plan {
    /// Level 1's `pcmk_off_timeout`: the plan's timeout, plus room for the
    /// priority-fencing-delay, which Pacemaker 2.1.5's fencer waits out
    /// within that timeout (measured: with a 1 s delay and 2 s, a level 1
    /// that takes 1 s was given up in 2 of 3 fencings), on a GLib timer of
    /// whole seconds that fires up to a second late (the 1 s delay took
    /// 1.2-1.7 s). So level 1 keeps the plan's timeout for its own work,
    /// and a dead one costs the delay more before level 2.
    fn level1_device_timeout(&self) -> u32 {
        let delay = self.priority_fencing_delay_seconds.0;
        self.fence_level1_timeout_seconds.0 + if delay > 0 { delay + 1 } else { 0 }
    }

    pub fn load(path: &Path) -> anyhow::Result<Plan> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let plan: Plan = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        plan.check().with_context(|| format!("{}", path.display()))?;
        Ok(plan)
    }

    fn check(&self) -> anyhow::Result<()> {
        check_id("cluster_name", &self.cluster_name)?;
        if self.node.len() != 2 {
            bail!("{} [[node]] tables: a Keel pair has exactly two nodes", self.node.len());
        }
        if self.node[0].name == self.node[1].name {
            bail!("both nodes are named {:?}", self.node[0].name);
        }
        if !(200..=60_000).contains(&self.token_ms) {
            bail!("token_ms = {}: between 200 and 60000", self.token_ms);
        }
        if let Some(consensus) = self.consensus_ms
            && !(CONSENSUS_MS_MIN..=60_000).contains(&consensus)
        {
            bail!(
                "consensus_ms = {consensus}: between {CONSENSUS_MS_MIN} (above Corosync's join timeout) and 60000, \
                 or unset for Corosync's 1.2 times token_ms"
            );
        }
        if !(1..=300).contains(&self.monitor_seconds) {
            bail!("monitor_seconds = {}: between 1 and 300", self.monitor_seconds);
        }
        let level1 = self.fence_level1_timeout_seconds.0;
        if !(1..=FENCE_LEVEL1_TIMEOUT_MAX_SECONDS).contains(&level1) {
            bail!(
                "fence_level1_timeout_seconds = {level1}: between 1 and {FENCE_LEVEL1_TIMEOUT_MAX_SECONDS}, \
                 which leaves level 2 its time within stonith-timeout ({STONITH_TIMEOUT_SECONDS} s)"
            );
        }
        let delay = self.priority_fencing_delay_seconds.0;
        if delay > PRIORITY_FENCING_DELAY_MAX_SECONDS {
            bail!(
                "priority_fencing_delay_seconds = {delay}: at most {PRIORITY_FENCING_DELAY_MAX_SECONDS} (every \
                 failover from a fenced node waits it), or 0 for none"
            );
        }
        if self.level1_device_timeout() > FENCE_LEVEL1_TIMEOUT_MAX_SECONDS {
            bail!(
                "fence_level1_timeout_seconds = {level1} with priority_fencing_delay_seconds = {delay}: level 1 \
                 gets both and a second more ({} s), over {FENCE_LEVEL1_TIMEOUT_MAX_SECONDS}, which leaves level 2 \
                 its time within stonith-timeout ({STONITH_TIMEOUT_SECONDS} s)",
                self.level1_device_timeout()
            );
        }
        if let Some(b) = &self.keel_binary {
            if !b.is_absolute() {
                bail!("keel_binary {} is not an absolute path", b.display());
            }
            crm_value(&b.display().to_string())?;
        }
        for n in &self.node {
            check_id("node name", &n.name)?;
            if n.fence.is_empty() || n.fence.len() > 2 {
                bail!(
                    "node {}: {} fence devices; give one or two (level 1, then level 2): without fencing, \
                     a node that only seems dead could keep writing to the shared storage",
                    n.name,
                    n.fence.len()
                );
            }
            for (level, f) in n.fence.iter().enumerate() {
                check_id("fence agent", &f.agent)?;
                for (k, v) in &f.params {
                    check_id("fence parameter", k)?;
                    crm_value(v).with_context(|| format!("node {} fence {} {k}", n.name, f.agent))?;
                    if level == 0 && n.fence.len() == 2 && LEVEL1_PARAMS.contains(&k.as_str()) {
                        bail!(
                            "node {}: fence {} sets {k}, which keel ha init sets on level 1 from \
                             fence_level1_timeout_seconds: set that instead",
                            n.name,
                            f.agent
                        );
                    }
                }
            }
        }
        if self.service.is_empty() || self.service.len() > 2 {
            bail!("{} [[service]] tables: one (active/passive) or two (active/active)", self.service.len());
        }
        for (i, s) in self.service.iter().enumerate() {
            check_id("service name", &s.name)?;
            split_address(&s.address).with_context(|| format!("service {}", s.name))?;
            for p in [&s.device, &s.mount] {
                if !p.is_absolute() {
                    bail!("service {}: {} is not an absolute path", s.name, p.display());
                }
                crm_value(&p.display().to_string())?;
            }
            check_layout(s)?;
            crm_value(&s.mount.join(&s.export).display().to_string())?;
            check_id("fstype", &s.fstype)?;
            if let Some(nic) = &s.nic {
                check_id("nic", nic)?;
            }
            if let Some(prefer) = &s.prefer
                && !self.node.iter().any(|n| &n.name == prefer)
            {
                bail!("service {}: prefer = {prefer:?} is not one of the nodes", s.name);
            }
            if let Some(other) =
                self.service[..i].iter().find(|o| o.name == s.name || o.device == s.device || o.mount == s.mount)
            {
                bail!("services {} and {} share a name, a device or a mount point", other.name, s.name);
            }
        }
        Ok(())
    }
}

/// The files `init` writes, by name.
pub fn render(plan: &Plan) -> anyhow::Result<Vec<(String, String)>> {
    let mut files =
        vec![("corosync.conf".to_string(), corosync_conf(plan)), ("cluster.crm".to_string(), crm_script(plan)?)];
    for s in &plan.service {
        files.push((format!("{}.toml", s.name), keel_config(s)?));
    }
    Ok(files)
}

fn corosync_conf(plan: &Plan) -> String {
    let mut c = String::new();
    let two_links = plan.node.iter().all(|n| n.heartbeat2.is_some());
    let _ = writeln!(c, "# Written by `keel ha init`. The same file on both nodes: /etc/corosync/corosync.conf");
    let _ = writeln!(c, "totem {{\n    version: 2\n    cluster_name: {}\n    transport: knet", plan.cluster_name);
    let _ = writeln!(c, "    # A node silent this long is lost: the largest part of a failover.");
    let _ = writeln!(c, "    token: {}", plan.token_ms);
    if let Some(consensus) = plan.consensus_ms {
        let _ = writeln!(c, "    # Agreement on the new membership; with two nodes it may be below the token.");
        let _ = writeln!(c, "    consensus: {consensus}");
    }
    let _ = writeln!(c, "    crypto_cipher: aes256\n    crypto_hash: sha256");
    let _ = writeln!(c, "    interface {{\n        linknumber: 0\n    }}");
    if two_links {
        let _ = writeln!(c, "    interface {{\n        linknumber: 1\n    }}");
    }
    let _ = writeln!(c, "}}\n\nnodelist {{");
    for (i, n) in plan.node.iter().enumerate() {
        let _ = writeln!(
            c,
            "    node {{\n        name: {}\n        nodeid: {}\n        ring0_addr: {}",
            n.name,
            i + 1,
            n.heartbeat
        );
        if let (true, Some(a)) = (two_links, n.heartbeat2) {
            let _ = writeln!(c, "        ring1_addr: {a}");
        }
        let _ = writeln!(c, "    }}");
    }
    let _ = writeln!(c, "}}\n");
    let _ = writeln!(c, "quorum {{\n    provider: corosync_votequorum");
    let _ = writeln!(c, "    # Two nodes: the survivor keeps quorum; fencing settles who survives.");
    let _ = writeln!(c, "    two_node: 1\n}}\n");
    // Milliseconds (Corosync's default; `on` stamps whole seconds): a
    // failover's steps are read from the logs, and each takes well under one.
    let _ = writeln!(
        c,
        "logging {{\n    to_logfile: yes\n    logfile: /var/log/corosync/corosync.log\n    to_syslog: yes\n    timestamp: hires\n}}"
    );
    c
}

/// Every resource's stickiness (rsc_defaults): a service stays where it
/// runs unless something outweighs it.
const STICKINESS: u32 = 100;
/// The members of a service's group: fs, ip, keel.
const GROUP_MEMBERS: u32 = 3;
/// A service's score on its preferred node. Pacemaker adds up the
/// stickiness of a group's members (300 for a started group, measured in
/// the two-node lab: with 200 here, a returning node never got its service
/// back), so the preference must exceed that sum for failback to happen.
const PREFER_SCORE: u32 = 1000;
const _: () = assert!(PREFER_SCORE > STICKINESS * GROUP_MEMBERS);

fn crm_script(plan: &Plan) -> anyhow::Result<String> {
    let mut c = String::new();
    let mon = plan.monitor_seconds;
    let _ = writeln!(c, "# Written by `keel ha init`. Load with: crm configure load update cluster.crm");
    // The action is written out, not left to Pacemaker's default: the
    // level-1 timeout below must be for the action the cluster requests.
    // transition-delay: see TRANSITION_DELAY_MS (a second saved when the
    // survivor is the DC).
    //
    // priority-fencing-delay: when the nodes lose each other at once while
    // both reach their fence devices (the heartbeat fails between them),
    // each fences the other: the serving node is fenced for nothing about
    // half the time, and with stonith-action=off both may end up off. With
    // the delay, a node that has lost its peer waits before it fences the
    // peer if the peer runs the services (the higher total `priority` of
    // its resources: each group's, below), and fences a peer that runs
    // none at once; so the serving node fences first, and the other's
    // request dies with it (the lab's fencing_race: 5 of 5, against 2 of 5
    // without). What it costs: Pacemaker cannot tell a peer that crashed
    // from one cut off, so every failover from a fenced node that served
    // waits the delay too (a crash, a hang, a lost heartbeat link; 1.2-1.7
    // s for 1 s in the lab), and level 1's timeout grows by it (see
    // level1_device_timeout). A static pcmk_delay_base on one node's
    // devices costs the same and keeps favouring that node after the
    // service has moved; the random pcmk_delay_max costs up to its maximum
    // and settles nothing for certain. It must exceed how long the serving
    // node's level 1 takes to power the other off, or both requests reach
    // the devices. It does not order fencing already under way on both
    // nodes when a heartbeat switch the devices sit behind comes back
    // (docs/ha.md, "When both nodes fence").
    let delay = plan.priority_fencing_delay_seconds.0;
    let priority_delay = if delay > 0 { format!(" priority-fencing-delay={delay}s") } else { String::new() };
    let _ = writeln!(
        c,
        "property cib-bootstrap-options: stonith-enabled=true stonith-action={} \
         stonith-timeout={STONITH_TIMEOUT_SECONDS}s cluster-recheck-interval=1min \
         transition-delay={TRANSITION_DELAY_MS}ms{priority_delay}",
        plan.fence_action.as_str()
    );
    // Stickiness keeps a service where it runs after a failover; a
    // preferred node's score (PREFER_SCORE) outweighs it, so a returning
    // node gets its own service back (active/active), and only that one.
    let _ = writeln!(
        c,
        "rsc_defaults rsc-options: resource-stickiness={STICKINESS} migration-threshold=1 failure-timeout=10min"
    );
    let _ = writeln!(c, "op_defaults op-options: timeout=30s\n");

    let mut topology = Vec::new();
    for n in &plan.node {
        let mut levels = Vec::new();
        for (level, f) in n.fence.iter().enumerate() {
            let id = format!("fence-{}-{}", n.name, level + 1);
            let mut params = format!("pcmk_host_list={}", crm_value(&n.name)?);
            for (k, v) in &f.params {
                let _ = write!(params, " {k}={}", crm_value(v)?);
            }
            if level == 0 && n.fence.len() == 2 {
                // A dead level-1 device (a BMC that no longer answers)
                // costs one timeout, not the agent's own timeout twice,
                // before level 2. For both actions: a reboot may be
                // carried out as off, then on.
                let t = plan.level1_device_timeout();
                let _ = write!(
                    params,
                    " \\\n    pcmk_reboot_timeout={t}s pcmk_reboot_retries=1 pcmk_off_timeout={t}s pcmk_off_retries=1"
                );
            }
            let _ = writeln!(
                c,
                "primitive {id} stonith:{} \\\n    params {params} \\\n    op monitor interval=60s",
                f.agent
            );
            // A node never runs the device that fences it.
            let _ = writeln!(c, "location {id}-not-on-{0} {id} -inf: {0}", n.name);
            levels.push(id);
        }
        topology.push(format!("{}: {}", n.name, levels.join(" ")));
    }
    let _ = writeln!(c, "fencing_topology {}\n", topology.join(" "));

    if !plan.ping.is_empty() {
        let hosts: Vec<String> = plan.ping.iter().map(|h| h.to_string()).collect();
        // Every second, three echoes 0.2 s apart and 1 s for an answer: a
        // dead link is seen in 1.4-2.4 s, and a lost echo or two moves
        // nothing. (The agent's defaults take 8 s: a 6 s wait per host.)
        let _ = writeln!(
            c,
            "primitive public-link ocf:pacemaker:ping \\\n    params host_list=\"{}\" multiplier=1000 dampen=0s \
             attempts=3 timeout=1 options=\"-i 0.2\" \\\n    op monitor interval=1s timeout=60s \
             op start timeout=60s",
            hosts.join(" ")
        );
        let _ = writeln!(c, "clone public-link-clone public-link\n");
    }

    for (i, s) in plan.service.iter().enumerate() {
        let (ip, prefix) = split_address(&s.address)?;
        let n = &s.name;
        let _ = writeln!(
            c,
            "primitive {n}-fs ocf:heartbeat:Filesystem \\\n    params device={} directory={} fstype={} \\\n    \
             op start timeout=60s op stop timeout=60s on-fail=fence \\\n    \
             op monitor interval={mon}s timeout=40s OCF_CHECK_LEVEL=20",
            crm_value(&s.device.display().to_string())?,
            crm_value(&s.mount.display().to_string())?,
            s.fstype
        );
        let nic = s.nic.as_ref().map_or(String::new(), |nic| format!(" nic={nic}"));
        let _ = writeln!(
            c,
            "primitive {n}-ip ocf:heartbeat:IPaddr2 \\\n    params ip={ip} cidr_netmask={prefix}{nic} \\\n    op monitor interval={mon}s"
        );
        let binary = match &plan.keel_binary {
            Some(b) => format!(" binary={}", crm_value(&b.display().to_string())?),
            None => String::new(),
        };
        let _ = writeln!(
            c,
            "primitive {n}-keel ocf:keel:keel \\\n    params config={}{binary} \\\n    \
             op start timeout=60s op stop timeout=60s on-fail=fence \\\n    op monitor interval={mon}s timeout=20s",
            crm_value(&keel_config_path(n).display().to_string())?
        );
        // Storage, then the server (listening on the address before it
        // exists), then the address: a client never finds the address
        // without a listener. Stopped in the reverse order.
        // (GROUP_MEMBERS counts them.)
        // Its priority, which each member inherits, makes the node that
        // runs it the one priority-fencing-delay protects. Active/active:
        // the first service outranks the second, so that the nodes are
        // never equal (Pacemaker then applies no delay at all).
        let priority = plan.service.len() - i;
        let _ = writeln!(c, "group {n} {n}-fs {n}-keel {n}-ip \\\n    meta priority={priority}");
        if let Some(prefer) = &s.prefer {
            let _ = writeln!(c, "location {n}-prefers-{prefer} {n} {PREFER_SCORE}: {prefer}");
        }
        if !plan.ping.is_empty() {
            let _ = writeln!(c, "location {n}-needs-public-link {n} rule -inf: not_defined pingd or pingd lte 0");
        }
        let _ = writeln!(c);
    }
    Ok(c)
}

fn keel_config(s: &Service) -> anyhow::Result<String> {
    let (ip, prefix) = split_address(&s.address)?;
    let clients = match &s.clients {
        Some(list) => list.clone(),
        None => vec![network_of(ip, prefix)],
    };
    let listen = match ip {
        IpAddr::V4(_) => format!("{ip}:2049"),
        IpAddr::V6(_) => format!("[{ip}]:2049"),
    };
    let mut c = String::new();
    let _ = writeln!(c, "# Written by `keel ha init` for service {}. The same file on both nodes:", s.name);
    let _ = writeln!(c, "# {}", keel_config_path(&s.name).display());
    let _ = writeln!(c, "\n[ha]\nenabled = true\n");
    let _ = writeln!(c, "[server]");
    let _ = writeln!(c, "# The floating address alone: it moves at failover, and a second service on");
    let _ = writeln!(c, "# the same node (active/active) listens on its own.");
    let _ = writeln!(c, "listen = [\"{listen}\"]");
    let (state_dir, export) = layout(s);
    let _ = writeln!(c, "# On the shared file system, beside the export and out of its clients' reach:");
    let _ = writeln!(c, "# the handle key and the lock state move with the service.");
    let _ = writeln!(c, "state_dir = {}", toml_string(&state_dir.display().to_string()));
    let _ = writeln!(c, "\n[[export]]");
    let _ = writeln!(c, "path = {}", toml_string(&export.display().to_string()));
    let _ = writeln!(
        c,
        "id = 1\naccess = \"rw\"\n# sync is required under [ha]: an async export loses acknowledged writes at failover."
    );
    for host in clients {
        let _ = writeln!(c, "[[export.clients]]\nhost = {}", toml_string(&host));
    }
    Ok(c)
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The commands that install what `render` wrote into `out`.
pub fn commands(plan: &Plan, out: &Path) -> String {
    // Without a trailing slash: `{o}/authkey`, not `out//authkey`.
    let out: std::path::PathBuf = out.components().collect();
    let o = out.display();
    let mut c = String::new();
    let _ = writeln!(c, "# On {}:", plan.node[0].name);
    let _ = writeln!(c, "corosync-keygen -k {o}/authkey");
    for n in &plan.node {
        let _ = writeln!(c, "# Install on {} (keel with its OCF agent, corosync, pacemaker, crmsh installed):", n.name);
        let _ = writeln!(c, "scp {o}/corosync.conf {o}/authkey root@{}:/etc/corosync/", n.name);
        for s in &plan.service {
            let _ = writeln!(c, "scp {o}/{}.toml root@{}:{}", s.name, n.name, keel_config_path(&s.name).display());
            let _ = writeln!(c, "ssh root@{} mkdir -p {}", n.name, s.mount.display());
        }
        let _ = writeln!(
            c,
            "ssh root@{} 'systemctl disable --now keel; systemctl enable --now corosync pacemaker'",
            n.name
        );
    }
    let _ = writeln!(c, "# Once `crm status` shows both nodes online, on either node:");
    for s in &plan.service {
        // Keel makes its state directory itself (mode 0700); the export's
        // owner and mode are the administrator's to choose.
        let (_, export) = layout(s);
        let _ = writeln!(
            c,
            "mount -t {} {} {m} && mkdir -p {} && umount {m}   # on one node, once: the directory clients mount",
            s.fstype,
            s.device.display(),
            export.display(),
            m = s.mount.display()
        );
    }
    let _ = writeln!(c, "crm configure load update {o}/cluster.crm");
    let _ = writeln!(c, "keel ha status");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../../contrib/ha/keel-ha.example.toml");

    fn plan(text: &str) -> anyhow::Result<Plan> {
        let plan: Plan = toml::from_str(text)?;
        plan.check()?;
        Ok(plan)
    }

    /// A mount point whose `export` directory exists, so the generated
    /// configuration's export path checks pass; removed at drop.
    struct MountPoint(PathBuf);

    impl MountPoint {
        fn new(name: &str) -> MountPoint {
            let dir = std::env::temp_dir().join(format!("keel-ha-init-{name}-{}", std::process::id()));
            std::fs::create_dir_all(dir.join("export")).unwrap();
            MountPoint(dir)
        }

        fn plan_text(&self) -> String {
            EXAMPLE.replace("mount = \"/srv/home\"", &format!("mount = {:?}", self.0.display().to_string()))
        }
    }

    impl Drop for MountPoint {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn rendered(p: &Plan, name: &str) -> String {
        render(p).unwrap().into_iter().find(|(n, _)| n == name).unwrap().1
    }

    #[test]
    fn the_example_plan_makes_a_fenced_group_with_two_levels() {
        let mount = MountPoint::new("example");
        let tmp = mount.0.clone();
        let p = plan(&mount.plan_text()).unwrap();
        let files = render(&p).unwrap();
        let get = |n: &str| &files.iter().find(|(name, _)| name == n).unwrap().1;
        let crm = get("cluster.crm");
        assert!(
            crm.contains("fencing_topology nss-a: fence-nss-a-1 fence-nss-a-2 nss-b: fence-nss-b-1 fence-nss-b-2"),
            "{crm}"
        );
        assert!(crm.contains("location fence-nss-a-1-not-on-nss-a fence-nss-a-1 -inf: nss-a"), "{crm}");
        assert!(crm.contains("group home home-fs home-keel home-ip"), "{crm}");
        assert!(crm.contains("location home-prefers-nss-a home 1000: nss-a"), "{crm}");
        assert!(crm.contains("resource-stickiness=100"), "{crm}");
        assert!(crm.contains("OCF_CHECK_LEVEL=20"), "the storage path is monitored: {crm}");
        assert!(
            crm.contains("location home-needs-public-link home rule -inf: not_defined pingd or pingd lte 0"),
            "{crm}"
        );
        assert!(crm.contains("params ip=10.1.0.100 cidr_netmask=24"), "{crm}");
        let corosync = get("corosync.conf");
        assert!(corosync.contains("token: 1000") && corosync.contains("two_node: 1"), "{corosync}");
        assert!(!corosync.contains("consensus"), "unset: Corosync's own, 1.2 times the token: {corosync}");
        let short = plan(&EXAMPLE.replacen("token_ms = 1000", "token_ms = 1000\nconsensus_ms = 300", 1)).unwrap();
        assert!(rendered(&short, "corosync.conf").contains("\n    consensus: 300\n"));
        assert!(corosync.contains("ring0_addr: 192.168.10.2"), "{corosync}");
        assert!(corosync.contains("timestamp: hires"), "the log's times in milliseconds: {corosync}");
        // The Keel configuration it writes is one `keel serve` accepts.
        let keel = get("home.toml");
        let config = crate::config::parse(keel, "home.toml").unwrap();
        assert!(config.ha);
        assert_eq!(config.server.listen, ["10.1.0.100:2049".parse().unwrap()]);
        assert_eq!(config.server.state_dir, tmp.join(".keel"));
        assert_eq!(config.exports[0].path, tmp.join("export"));
        assert_eq!(config.exports[0].clients[0].host.to_string(), "10.1.0.0/24");
    }

    /// The handle key is in state_dir: a state_dir inside the export (the
    /// old layout, `<mount>/.keel` with `<mount>` exported) let any client
    /// of the export LOOKUP `.keel/handle.key` and READ it.
    #[test]
    fn the_state_is_beside_the_export_never_inside_it() {
        let mount = MountPoint::new("layout");
        let p = plan(&mount.plan_text()).unwrap();
        let config = crate::config::parse(&rendered(&p, "home.toml"), "home.toml").unwrap();
        let (state, export) = (&config.server.state_dir, &config.exports[0].path);
        assert!(!state.starts_with(export) && !export.starts_with(state), "{state:?} and {export:?}");
        // Both on the shared file system that moves with the service.
        assert_eq!((state.parent(), export.parent()), (Some(mount.0.as_path()), Some(mount.0.as_path())));
        let cmds = commands(&p, Path::new("out"));
        assert!(cmds.contains(&format!("mkdir -p {}/export", mount.0.display())), "{cmds}");

        // Without the key: the default, `export`.
        let bare = plan(&mount.plan_text().replace("export = \"export\"", "")).unwrap();
        assert_eq!(layout(&bare.service[0]), (mount.0.join(".keel"), mount.0.join("export")));
        // Another directory under the mount point is fine.
        let text = mount.plan_text().replace("export = \"export\"", "export = \"data/home\"");
        assert_eq!(layout(&plan(&text).unwrap().service[0]).1, mount.0.join("data/home"));
        // Layouts that would put the state inside the export, or the
        // export inside the state, or outside the mount point.
        for (export, why) in [
            ("", "relative path"),
            (".", "relative path"),
            ("./", "relative path"),
            ("..", "relative path"),
            ("data/../..", "relative path"),
            ("/srv/home", "relative path"),
            (".keel", "overlap"),
            (".keel/export", "overlap"),
        ] {
            let text = mount.plan_text().replace("export = \"export\"", &format!("export = {export:?}"));
            let err = format!("{:#}", plan(&text).unwrap_err());
            assert!(err.contains(why), "export = {export:?}: {err}");
        }
    }

    #[test]
    fn level_one_gives_up_after_the_plans_timeout_for_the_action_the_cluster_requests() {
        // Without the priority-fencing-delay (the example's), which adds
        // to level 1's timeout (see the_serving_node_wins_a_fencing_race).
        let text = EXAMPLE.to_string();
        let p = plan(&text).unwrap();
        assert_eq!((p.fence_action, p.fence_level1_timeout_seconds), (FenceAction::Off, WholeSeconds(2)));
        let crm = rendered(&p, "cluster.crm");
        assert!(crm.contains("stonith-action=off"), "{crm}");
        let level1 = "pcmk_reboot_timeout=2s pcmk_reboot_retries=1 pcmk_off_timeout=2s pcmk_off_retries=1";
        for n in ["nss-a", "nss-b"] {
            assert!(device_of(&crm, &format!("fence-{n}-1")).contains(level1), "{crm}");
            assert!(!device_of(&crm, &format!("fence-{n}-2")).contains("_timeout"), "level 2 keeps its own: {crm}");
        }

        let text = text
            .replace("fence_action = \"off\"", "fence_action = \"reboot\"")
            .replace("fence_level1_timeout_seconds = 2", "fence_level1_timeout_seconds = 9");
        let crm = rendered(&plan(&text).unwrap(), "cluster.crm");
        assert!(crm.contains("stonith-action=reboot"), "{crm}");
        assert!(crm.contains("pcmk_reboot_timeout=9s pcmk_reboot_retries=1"), "{crm}");
        // Without the keys: the defaults.
        let bare = EXAMPLE.replace("fence_action = \"off\"", "").replace("fence_level1_timeout_seconds = 2", "");
        let bare = plan(&bare).unwrap();
        assert_eq!((bare.fence_action, bare.fence_level1_timeout_seconds), (FenceAction::Off, WholeSeconds(2)));

        // A node with one device: no timeout shortened, nothing to fall back to.
        let one = text.replacen(
            "  { agent = \"fence_apc_snmp\", params = { ip = \"192.168.10.20\", plug = \"1\" } },\n",
            "",
            1,
        );
        let crm = rendered(&plan(&one).unwrap(), "cluster.crm");
        assert!(!device_of(&crm, "fence-nss-a-1").contains("pcmk_off_timeout"), "{crm}");
        assert!(device_of(&crm, "fence-nss-b-1").contains("pcmk_off_timeout"), "{crm}");
    }

    /// Pacemaker 2.1.5's DC, on losing its peer, computes nothing until
    /// its own updates of the peer's state are in the CIB, and a query
    /// that finds them pending costs a second's sleep: the controller
    /// waits a little for them first.
    #[test]
    fn pacemaker_waits_for_the_dcs_own_updates_before_it_computes_a_transition() {
        let crm = rendered(&plan(EXAMPLE).unwrap(), "cluster.crm");
        let property = crm.lines().find(|l| l.starts_with("property cib-bootstrap-options:")).unwrap();
        let delay = property
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("transition-delay="))
            .unwrap_or_else(|| panic!("no transition-delay: {property}"));
        // Milliseconds, which Pacemaker reads as such, and well under the
        // second it saves.
        let ms: u32 = delay.strip_suffix("ms").and_then(|n| n.parse().ok()).expect(delay);
        assert!((50..=500).contains(&ms), "{property}");
    }

    /// When the nodes lose each other at once, both fence; the node that
    /// serves must win, or with stonith-action=off both may end up off.
    /// priority-fencing-delay delays the fencing of the node whose
    /// resources have the higher total priority; each group carries one,
    /// distinct per service, so the two nodes of an active/active pair are
    /// never equal (Pacemaker then delays neither).
    #[test]
    fn the_serving_node_wins_a_fencing_race() {
        let example = EXAMPLE.replace("priority_fencing_delay_seconds = 0", "priority_fencing_delay_seconds = 1");
        let crm = rendered(&plan(&example).unwrap(), "cluster.crm");
        let property = crm.lines().find(|l| l.starts_with("property cib-bootstrap-options:")).unwrap();
        assert!(property.split_whitespace().any(|kv| kv == "priority-fencing-delay=1s"), "{property}");
        assert!(crm.contains("group home home-fs home-keel home-ip \\\n    meta priority=1\n"), "{crm}");
        // No pcmk_delay_*: it would add to every fencing, and favour a
        // node rather than the service.
        assert!(!crm.contains("pcmk_delay"), "{crm}");
        // Pacemaker's fencer waits the delay out within level 1's
        // timeout, on a timer of whole seconds: level 1 gets the delay and
        // a second more, and keeps the plan's 2 s for its own work.
        for n in ["nss-a", "nss-b"] {
            let level1 = device_of(&crm, &format!("fence-{n}-1"));
            assert!(level1.contains("pcmk_off_timeout=4s") && level1.contains("pcmk_reboot_timeout=4s"), "{crm}");
            assert!(!device_of(&crm, &format!("fence-{n}-2")).contains("_timeout"), "{crm}");
        }
        let text = example.replace("fence_level1_timeout_seconds = 2", "fence_level1_timeout_seconds = 15");
        let text = text.replace("priority_fencing_delay_seconds = 1", "priority_fencing_delay_seconds = 5");
        let err = format!("{:#}", plan(&text).unwrap_err());
        assert!(err.contains("level 1 gets both and a second more (21 s)"), "{err}");

        let two = format!(
            "{}\n[[service]]\nname = \"scratch\"\naddress = \"10.1.0.101/24\"\ndevice = \"/dev/sdc\"\n\
             mount = \"/srv/scratch\"\nprefer = \"nss-b\"\n",
            example
        );
        let crm = rendered(&plan(&two).unwrap(), "cluster.crm");
        assert!(crm.contains("group home home-fs home-keel home-ip \\\n    meta priority=2\n"), "{crm}");
        assert!(crm.contains("group scratch scratch-fs scratch-keel scratch-ip \\\n    meta priority=1\n"), "{crm}");

        // Off in the example and by default (the 5 s goal).
        assert!(!rendered(&plan(EXAMPLE).unwrap(), "cluster.crm").contains("priority-fencing-delay"));
        let bare = plan(&EXAMPLE.replace("priority_fencing_delay_seconds = 0", "")).unwrap();
        assert_eq!(bare.priority_fencing_delay_seconds, WholeSeconds(0));
        for (value, why) in [("11", "at most 10"), ("0.5", "whole seconds"), ("\"1s\"", "whole seconds")] {
            let text = EXAMPLE
                .replace("priority_fencing_delay_seconds = 0", &format!("priority_fencing_delay_seconds = {value}"));
            let err = format!("{:#}", plan(&text).unwrap_err());
            assert!(err.contains(why), "{value}: {err}");
        }
    }

    fn device_of(crm: &str, id: &str) -> String {
        let at = crm.find(&format!("primitive {id} ")).unwrap();
        crm[at..].split("\nlocation").next().unwrap().to_string()
    }

    #[test]
    fn a_level_one_timeout_pacemaker_would_misread_is_refused() {
        for (value, why) in [
            ("1.5", "whole seconds"),
            ("\"1500ms\"", "whole seconds"),
            ("\"2s\"", "whole seconds"),
            ("-1", "whole seconds"),
            ("0", "between 1 and 20"),
            ("21", "between 1 and 20"),
        ] {
            let text =
                EXAMPLE.replace("fence_level1_timeout_seconds = 2", &format!("fence_level1_timeout_seconds = {value}"));
            let err = format!("{:#}", plan(&text).unwrap_err());
            assert!(err.contains(why), "{value}: {err}");
        }
        let text = EXAMPLE.replace("fence_action = \"off\"", "fence_action = \"cycle\"");
        let err = format!("{:#}", plan(&text).unwrap_err());
        assert!(err.contains("unknown variant") && err.contains("reboot"), "{err}");
        let text =
            EXAMPLE.replacen("lanplus = \"1\", power_wait", "lanplus = \"1\", pcmk_off_timeout = \"9\", power_wait", 1);
        let err = format!("{:#}", plan(&text).unwrap_err());
        assert!(err.contains("set that instead"), "{err}");
    }

    /// crmsh warns at load when an operation's timeout is below what the
    /// agent advises (Filesystem: monitor 40 s; ping: start and monitor
    /// 60 s); the lab's load asserts no warning at all.
    #[test]
    fn operation_timeouts_are_at_least_what_the_agents_advise() {
        let crm = rendered(&plan(EXAMPLE).unwrap(), "cluster.crm");
        assert!(crm.contains("op monitor interval=2s timeout=40s OCF_CHECK_LEVEL=20"), "{crm}");
        assert!(crm.contains("op monitor interval=1s timeout=60s op start timeout=60s"), "{crm}");
    }

    #[test]
    fn a_plan_that_cannot_make_a_safe_pair_is_refused_saying_why() {
        let cases: [(&str, &str, &str); 7] = [
            ("name = \"nss-b\"", "name = \"nss-a\"", "both nodes are named"),
            (
                "fence = [\n  { agent = \"fence_ipmilan\", params = { ip = \"192.168.10.12\", username = \"root\", password = \"secret\", lanplus = \"1\", power_wait = \"0\" } },\n  { agent = \"fence_apc_snmp\", params = { ip = \"192.168.10.20\", plug = \"2\" } },\n]",
                "fence = []",
                "without fencing",
            ),
            ("address = \"10.1.0.100/24\"", "address = \"10.1.0.100\"", "with its prefix"),
            ("prefer = \"nss-a\"", "prefer = \"nss-c\"", "not one of the nodes"),
            ("plug = \"1\"", "plug = \"1\\\" op start\"", "quote"),
            ("token_ms = 1000", "token_ms = 10", "between 200 and 60000"),
            ("token_ms = 1000", "token_ms = 1000\nconsensus_ms = 50", "above Corosync's join timeout"),
        ];
        for (from, to, why) in cases {
            assert!(EXAMPLE.contains(from), "{from}");
            let text = EXAMPLE.replacen(from, to, 1);
            let err = format!("{:#}", plan(&text).unwrap_err());
            assert!(err.contains(why), "{to}: {err}");
        }
        let three = format!("{EXAMPLE}\n[[node]]\nname = \"c\"\nheartbeat = \"192.168.10.3\"\nfence = []\n");
        assert!(format!("{:#}", plan(&three).unwrap_err()).contains("exactly two nodes"));
    }
}
