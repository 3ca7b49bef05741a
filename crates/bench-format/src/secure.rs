//! What to tell the user when a `secure` export refuses this client because
//! its calls came from an ordinary source port.

use keel_client::proto::Nfsstat3;
use keel_client::proto::mount::Mountstat3;
use keel_client::{ClientError, ConnectOptions};

/// `err` followed by an explanation when it is the refusal a `secure`
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
    // The cause first, then what to do about it on lines of their own.
    anyhow::anyhow!(
        "{err:#}\n\
         The server refused this client because its calls came from an ordinary source port (above \
         1023).\nExports are `secure` by default (as with knfsd): they take calls only from reserved \
         ports, which only root can bind on the client.\nTo fix: {what_to_do} mark the export \
         `insecure = true` for this client in the server's configuration (then every user of this \
         client host can act as any uid the export does not squash)."
    )
}
