//! `keel status`: whether the running server serves and is healthy.

use std::path::PathBuf;
use std::process::ExitCode;

use super::AdminArgs;
use super::out::{errln, outln};
use crate::admin;

/// `keel status`: 0 healthy, 1 unhealthy, 3 no answer (as LSB's "not
/// running"), so that a monitoring check or a resource agent can use it.
pub fn run(server: &AdminArgs, json: bool, timeout: u64) -> ExitCode {
    let timeout = Some(std::time::Duration::from_secs(timeout.max(1)));
    let ask = |socket: PathBuf| admin::call_with_progress(&socket, &admin::Request::Status {}, timeout, |_| {});
    let answer = match server.socket().and_then(ask) {
        Ok(answer) => answer,
        Err(e) => {
            errln!("keel: {e:#}");
            return ExitCode::from(3);
        }
    };
    let s: admin::Status = match serde_json::from_value(answer.clone()) {
        Ok(s) => s,
        Err(e) => {
            errln!("keel: the server's status does not parse: {e}");
            return ExitCode::from(1);
        }
    };
    if json {
        outln!("{answer}");
    } else {
        let started = std::time::UNIX_EPOCH + std::time::Duration::from_secs(s.started_unix);
        let health = if s.healthy { "healthy".to_string() } else { format!("UNHEALTHY: {}", s.problems.join("; ")) };
        outln!("keel {}: {health}", s.version);
        outln!("serving since {} (up {} s), pid {}", keel_stats::time::rfc3339(started), s.uptime_seconds, s.pid);
        if let Some(file) = &s.config_file {
            outln!("configuration {file}");
        }
        outln!("listen {}", s.listen.join(", "));
        outln!("write verifier {}", s.write_verifier);
        outln!(
            "{} connections from {} client hosts; {} of {} workers busy",
            s.connections,
            s.clients,
            s.workers_busy,
            s.workers
        );
        if let Some(v4) = &s.nfs4 {
            let grace = match v4.grace_remaining_seconds {
                Some(left) => format!("; in grace ({left} s left at most)"),
                None => String::new(),
            };
            outln!("NFSv4: {} clients ({} courtesy), {} sessions{grace}", v4.clients, v4.courtesy_clients, v4.sessions);
        }
        if let Some(k) = &s.kerberos {
            outln!("Kerberos: principal {} from keytab {}; {} contexts", k.principal, k.keytab, k.contexts);
            let calls: Vec<String> = k.calls_by_flavor.iter().map(|f| format!("{} {}", f.flavor, f.calls)).collect();
            outln!("calls by flavor: {}", calls.join(", "));
            let failed: Vec<String> =
                k.auth_failures.iter().filter(|f| f.count > 0).map(|f| format!("{} {}", f.cause, f.count)).collect();
            let failed = if failed.is_empty() { "none".to_owned() } else { failed.join(", ") };
            outln!("Kerberos authentication failures: {failed}");
        }
        outln!("{} objects open in the inode cache", s.cached_inodes);
        for e in &s.exports {
            outln!("export {} {} fsid {}", e.id, e.path, e.fsid);
        }
    }
    if s.healthy { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
