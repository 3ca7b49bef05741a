//! What to tell the user when a `secure` export refuses this client because
//! its calls came from an ordinary source port.

use keel_client::proto::Nfsstat3;
use keel_client::proto::mount::Mountstat3;
use keel_client::{ClientError, ConnectOptions};

/// `err` with an explanation in front when it is the refusal a `secure`
/// export gives a client calling from a port above 1023 (MNT3ERR_ACCES or
/// MNT3ERR_PERM from MOUNT, NFS3ERR_PERM from NFS) and this client did
/// call from such a port; any other error comes back as it was.
pub fn explain_refusal(err: anyhow::Error, opts: &ConnectOptions) -> anyhow::Error {
    let refused = err.chain().filter_map(|e| e.downcast_ref::<ClientError>()).any(|e| {
        matches!(e, ClientError::Mount(Mountstat3::Acces | Mountstat3::Perm) | ClientError::Nfs(Nfsstat3::Perm))
    });
    if !refused {
        return err;
    }
    let what_to_do = if !opts.reserved_port {
        "--noresvport was given: leave it out (as root), or"
    } else if !keel_client::reserved_port_available() {
        "run this command as root (it then calls from a reserved port, as the kernel client and \
         libnfs do as root), or"
    } else {
        // A reserved port was used, so the refusal has another cause (the
        // client list, for one): nothing to add.
        return err;
    };
    err.context(format!(
        "the server refused this client, whose calls came from an ordinary source port (above 1023). \
         Exports are `secure` by default (as with knfsd): they accept only calls from reserved ports, \
         which only root can bind on the client. To fix: {what_to_do} mark the export \
         `insecure = true` for this client in the server's configuration (then any user of this \
         client host can act as any uid the export does not squash)"
    ))
}
