//! Everything a configuration must satisfy on this machine before it is
//! served, in one function, [`check`], which `keel serve` runs at start,
//! `keel check-config` runs on its file, and every export reload (SIGHUP,
//! `keel exports reload`) runs on the new file: the three cannot drift.
//!
//! `config::load` has already checked the file itself (syntax, keys,
//! values, paths that exist). What is checked here needs the machine:
//! where directories are, what each export root is as a file system.
//!
//! To add a check: write `fn(&Config, &mut Findings)` and list it in
//! [`CHECKS`]; every problem found is reported, each with its line when it
//! concerns one export.

use std::path::Path;

use keel_store_local::{Export, ExportIdentity, ExportSpec, FsidSource};

use crate::config::{Config, ConfigError, Problem};

/// A configuration that passed every check, and what the checks learned.
#[derive(Debug)]
pub struct Checked {
    /// Each export's identity as the server computes it, in the
    /// configuration's order, with its id.
    pub exports: Vec<(u32, ExportIdentity)>,
    /// The file's warnings (`Config::warnings`, `FILE:LINE: ...`), then
    /// those of the checks (about this machine).
    pub warnings: Vec<String>,
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

impl Findings {
    /// Something that stops the configuration from being served; `line`
    /// is the line of the table it concerns (an export's), if any.
    pub fn problem(&mut self, line: Option<usize>, message: impl Into<String>) {
        self.problems.push(Problem { line, message: message.into(), snippet: None });
    }

    /// Something the administrator should know that does not stop it.
    pub fn warning(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }
}

/// The checks that read the configuration and the machine; the exports'
/// roots are examined after them ([`identify_exports`]).
const CHECKS: &[fn(&Config, &mut Findings)] =
    &[crate::state_dir::check_not_exported, crate::ha::check_shared, reserved_ports];

/// Runs every check on `config` (read from `origin`, which begins every
/// message): all the problems found, or what the server will use.
pub fn check(config: &Config, origin: &str) -> Result<Checked, ConfigError> {
    let mut found = Findings::default();
    for check in CHECKS {
        check(config, &mut found);
    }
    let exports = identify_exports(config, &mut found);
    if found.problems.is_empty() {
        let mut warnings = config.warnings.clone();
        warnings.extend(found.warnings);
        Ok(Checked { exports, warnings })
    } else {
        // Stable: problems without a line first, then in file order.
        found.problems.sort_by_key(|p| p.line);
        Err(ConfigError::Invalid { origin: origin.to_owned(), problems: found.problems })
    }
}

/// Each export root examined as `keel serve` opens it (the same code,
/// without the handle key): it must open as a directory on a file system
/// that gives file handles, and under `[ha]` its fsid must come from the
/// configuration or the file system's UUID, which the peer sees too (it
/// sees the shared device under another device number).
fn identify_exports(config: &Config, found: &mut Findings) -> Vec<(u32, ExportIdentity)> {
    let mut identified = Vec::new();
    for e in &config.exports {
        let spec = ExportSpec { id: e.id, path: e.path.clone(), fsid: e.fsid };
        let identity = match Export::identify(&spec) {
            Ok(identity) => identity,
            Err(err) => {
                found.problem(e.table_line(), format!("cannot export {} (id {}): {err}", e.path.display(), e.id));
                continue;
            }
        };
        if config.ha && matches!(identity.fsid_source, FsidSource::Statfs | FsidSource::Device) {
            found.problem(
                e.table_line(),
                format!(
                    "[ha] enabled but export {} (id {}) has no file system UUID to take its fsid from: the \
                     other node would hand out other file handles; set fsid in its [[export]] table",
                    e.path.display(),
                    e.id
                ),
            );
        }
        identified.push((e.id, identity));
    }
    identified
}

/// Where an export's fsid comes from, in words (the start's log and
/// `keel check-config` say the same).
pub fn fsid_source_text(source: FsidSource) -> &'static str {
    match source {
        FsidSource::Configured => "the configuration",
        FsidSource::FsUuid => "the file system UUID",
        FsidSource::Statfs => "statfs (set fsid to keep handles valid if the device is renumbered)",
        FsidSource::Device => "the device number (set fsid to keep handles valid if the device is renumbered)",
    }
}

/// Where Linux keeps the lowest port an unprivileged process cannot bind
/// (per network namespace).
const UNPRIVILEGED_PORT_START: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";

/// `secure` trusts a source port below 1024 to mean "root on the client".
/// On this host that holds only if ordinary users cannot bind such ports;
/// containers often lower `ip_unprivileged_port_start` to 0. (It is the
/// clients' setting that matters; this host's is the one Keel can see, and
/// it decides for local clients.)
fn reserved_ports(config: &Config, found: &mut Findings) {
    let any_secure = config.exports.iter().flat_map(|e| &e.clients).any(|r| r.options.secure);
    let Ok(text) = std::fs::read_to_string(Path::new(UNPRIVILEGED_PORT_START)) else { return };
    let Ok(start) = text.trim().parse::<u32>() else { return };
    if any_secure && start < 1024 {
        found.warning(format!(
            "{UNPRIVILEGED_PORT_START} is {start}: any local user can bind ports {start} to 1023, so `secure` \
             cannot tell root from an ordinary user on this host; set it to 1024 \
             (sysctl net.ipv4.ip_unprivileged_port_start=1024) or do not export to local clients"
        ));
    }
}
