//! `keel ha init PLAN --out DIR`: from a short description of the pair
//! (nodes, fence devices, shared storage, floating addresses), the files
//! NSS-HA's `cluster_config.sh` produced: `corosync.conf`, a crmsh script
//! with every Pacemaker resource, constraint and the fencing topology, and
//! one Keel configuration per service. It runs nothing: it prints the
//! commands that install them, for the administrator to read first.

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
    /// How often Pacemaker asks each resource whether it is healthy.
    #[serde(default = "default_monitor_seconds")]
    pub monitor_seconds: u32,
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
    pub mount: PathBuf,
    #[serde(default = "default_fstype")]
    pub fstype: String,
    /// The node that runs it when both are up (active/active: one service
    /// prefers each node). Without one, it stays where it runs.
    pub prefer: Option<String>,
    /// Who may mount the export: the service address's network by default.
    pub clients: Option<Vec<String>>,
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
        if !(1..=300).contains(&self.monitor_seconds) {
            bail!("monitor_seconds = {}: between 1 and 300", self.monitor_seconds);
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
            for f in &n.fence {
                check_id("fence agent", &f.agent)?;
                for (k, v) in &f.params {
                    check_id("fence parameter", k)?;
                    crm_value(v).with_context(|| format!("node {} fence {} {k}", n.name, f.agent))?;
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
    let _ = writeln!(
        c,
        "logging {{\n    to_logfile: yes\n    logfile: /var/log/corosync/corosync.log\n    to_syslog: yes\n    timestamp: on\n}}"
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
    let _ = writeln!(
        c,
        "property cib-bootstrap-options: stonith-enabled=true stonith-timeout=30s cluster-recheck-interval=1min"
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
             attempts=3 timeout=1 options=\"-i 0.2\" \\\n    op monitor interval=1s timeout=20s",
            hosts.join(" ")
        );
        let _ = writeln!(c, "clone public-link-clone public-link\n");
    }

    for s in &plan.service {
        let (ip, prefix) = split_address(&s.address)?;
        let n = &s.name;
        let _ = writeln!(
            c,
            "primitive {n}-fs ocf:heartbeat:Filesystem \\\n    params device={} directory={} fstype={} \\\n    \
             op start timeout=60s op stop timeout=60s on-fail=fence \\\n    \
             op monitor interval={mon}s timeout=20s OCF_CHECK_LEVEL=20",
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
        // Storage, then the address, then the server (which listens on
        // it); stopped in the reverse order. (GROUP_MEMBERS counts them.)
        let _ = writeln!(c, "group {n} {n}-fs {n}-ip {n}-keel");
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
    let _ = writeln!(c, "# On the shared file system: the handle key and the lock state move with it.");
    let _ = writeln!(c, "state_dir = {}", toml_string(&s.mount.join(".keel").display().to_string()));
    let _ = writeln!(c, "\n[[export]]");
    let _ = writeln!(c, "path = {}", toml_string(&s.mount.display().to_string()));
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
        let _ = writeln!(
            c,
            "mkdir -p {}/.keel   # on the node where {} is mounted, once",
            s.mount.display(),
            s.device.display()
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

    #[test]
    fn the_example_plan_makes_a_fenced_group_with_two_levels() {
        // A mount point that exists here, so the export path checks pass.
        let tmp = std::env::temp_dir();
        let p = plan(&EXAMPLE.replace("mount = \"/srv/home\"", &format!("mount = {:?}", tmp.display().to_string())))
            .unwrap();
        let files = render(&p).unwrap();
        let get = |n: &str| &files.iter().find(|(name, _)| name == n).unwrap().1;
        let crm = get("cluster.crm");
        assert!(
            crm.contains("fencing_topology nss-a: fence-nss-a-1 fence-nss-a-2 nss-b: fence-nss-b-1 fence-nss-b-2"),
            "{crm}"
        );
        assert!(crm.contains("location fence-nss-a-1-not-on-nss-a fence-nss-a-1 -inf: nss-a"), "{crm}");
        assert!(crm.contains("group home home-fs home-ip home-keel"), "{crm}");
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
        assert!(corosync.contains("ring0_addr: 192.168.10.2"), "{corosync}");
        // The Keel configuration it writes is one `keel serve` accepts.
        let keel = get("home.toml");
        let config = crate::config::parse(keel, "home.toml").unwrap();
        assert!(config.ha);
        assert_eq!(config.server.listen, ["10.1.0.100:2049".parse().unwrap()]);
        assert_eq!(config.server.state_dir, tmp.join(".keel"));
        assert_eq!(config.exports[0].clients[0].host.to_string(), "10.1.0.0/24");
    }

    #[test]
    fn a_plan_that_cannot_make_a_safe_pair_is_refused_saying_why() {
        let cases: [(&str, &str, &str); 6] = [
            ("name = \"nss-b\"", "name = \"nss-a\"", "both nodes are named"),
            (
                "fence = [\n  { agent = \"fence_ipmilan\", params = { ip = \"192.168.10.12\", username = \"root\", password = \"secret\", lanplus = \"1\" } },\n  { agent = \"fence_apc_snmp\", params = { ip = \"192.168.10.20\", plug = \"2\" } },\n]",
                "fence = []",
                "without fencing",
            ),
            ("address = \"10.1.0.100/24\"", "address = \"10.1.0.100\"", "with its prefix"),
            ("prefer = \"nss-a\"", "prefer = \"nss-c\"", "not one of the nodes"),
            ("plug = \"1\"", "plug = \"1\\\" op start\"", "quote"),
            ("token_ms = 1000", "token_ms = 10", "between 200 and 60000"),
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
