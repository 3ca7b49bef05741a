//! Filehandles (RFC 8881 sections 18.8, 18.19 to 18.21, 18.27, 18.28):
//! PUTFH, PUTROOTFH, PUTPUBFH, GETFH, SAVEFH, RESTOREFH.

use keel_exports::Reached;
use keel_nfs4_proto::{Getfh4ResOk, NfsFh4, Nfsstat4, Putfh4Args};
use keel_store::{Object, Store};

use crate::compound::{Compound, ExportFh, Filehandle};
use crate::errno::status;

/// The filehandle of what a pseudo directory's name reaches: another
/// pseudo directory, or the root of an export the client was admitted to
/// when its pseudo file system was built (admitted again here, as every
/// use of an export's handle is).
pub(super) fn reached<S: Store>(c: &mut Compound<'_, S>, to: Reached) -> Result<Filehandle<S::Object>, Nfsstat4> {
    match to {
        Reached::Pseudo(node) => Ok(Filehandle::Pseudo(node)),
        Reached::ExportRoot(id) => export_root(c, id).map(Filehandle::Export),
    }
}

/// The root of export `id`, admitted for this client.
pub(super) fn export_root<S: Store>(c: &mut Compound<'_, S>, id: u32) -> Result<ExportFh<S::Object>, Nfsstat4> {
    let root = c.store().lookup_path(id, b"/").map_err(|e| status(&e))?;
    c.admit(root.handle())
}

/// Sets the current filehandle; the current stateid goes with the one it
/// replaces (knfsd's `clear_current_stateid`).
fn set_current<S: Store>(c: &mut Compound<'_, S>, fh: Filehandle<S::Object>) {
    c.current = Some(fh);
    c.stateid.clear();
}

pub(super) fn putfh<S: Store>(c: &mut Compound<'_, S>, args: Putfh4Args) -> Result<(), Nfsstat4> {
    let fh = c.resolve(&args.object.0)?;
    set_current(c, fh);
    Ok(())
}

pub(super) fn putrootfh<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<(), Nfsstat4> {
    let root = c.pseudo().root();
    let fh = reached(c, root)?;
    set_current(c, fh);
    Ok(())
}

/// The public filehandle is the root, as knfsd's (no WebNFS).
pub(super) fn putpubfh<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<(), Nfsstat4> {
    putrootfh(c, ())
}

pub(super) fn getfh<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<Getfh4ResOk, Nfsstat4> {
    let handle = match c.current()? {
        Filehandle::Export(fh) => fh.object.handle().clone(),
        Filehandle::Pseudo(node) => {
            let node = *node;
            c.pseudo().handle(node)
        }
    };
    Ok(Getfh4ResOk { object: NfsFh4(handle) })
}

pub(super) fn savefh<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<(), Nfsstat4> {
    c.saved = Some(c.current()?.clone());
    c.stateid.save();
    Ok(())
}

pub(super) fn restorefh<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<(), Nfsstat4> {
    c.current = Some(c.saved.clone().ok_or(Nfsstat4::Restorefh)?);
    c.stateid.restore();
    Ok(())
}
