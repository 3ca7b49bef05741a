//! The server side of RPCSEC_GSS (RFC 2203) with the Kerberos V5
//! mechanism, through the system's GSS-API: contexts established on the
//! NULL procedure of any program (RPCSEC_GSS_INIT and _CONTINUE_INIT),
//! kept in a bounded table, checked on every call (header checksum,
//! sequence window), and the calls' bodies unwrapped and their replies
//! wrapped at the service the call asks for.
//!
//! What a call gets (section 5.3.3 and the GSS-API error mapping of
//! 5.3.3.4, as knfsd answers them):
//! - a credential that does not decode, an RPCSEC_GSS_INIT to a procedure
//!   other than NULL, a call verifier of another flavor: AUTH_BADCRED
//!   (AUTH_BADVERF for the verifier);
//! - a context handle the server does not know (never had, evicted,
//!   destroyed, expired with its ticket), or a header checksum that does
//!   not verify: RPCSEC_GSS_CREDPROBLEM, and the client establishes a new
//!   context (Linux, FreeBSD and Solaris answer an unknown handle so);
//! - a sequence number at or above MAXSEQ: RPCSEC_GSS_CTXPROBLEM;
//! - a sequence number seen before or below the window: no reply;
//! - a body whose checksum does not verify, that does not unwrap, or whose
//!   sequence number is not the credential's: GARBAGE_ARGS;
//! - an establishment token GSS-API refuses: a reply with its major and
//!   minor status (section 5.2.3.1), and no context.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use keel_store::Cred;
use keel_xdr::{Decoder, Encoder};

use super::idmap::IdentityCache;
use super::sealer::{self, Sealer};
use super::stats::{AuthFailure, GssCounts};
use super::window::{SEQ_WINDOW, SeqWindow};
use super::wire::{
    GssCred, GssInitRes, GssProc, GssService, IntegData, MAXSEQ, RPCSEC_GSS, decode_init_arg, decode_priv_data,
    header_bytes_through_cred, split_seq_num,
};
use crate::Privileged;
use crate::cred::{Credential, SecurityContext};
use crate::dispatch::ReplySegments;
use crate::msg::{AcceptStat, AuthStat, CallHeader, OpaqueAuth, ReplyStat, encode_reply_header_with};
use crate::sys::{AcceptContext, AcceptStep, AcceptorCred, GssStatus, NameKind};

/// GSS_S_CONTINUE_NEEDED, for an RPCSEC_GSS_INIT reply (RFC 2743).
const GSS_S_CONTINUE_NEEDED: u32 = 1;
/// Bytes of a context handle this server makes: a random number drawn at
/// start and a counter, so no handle is made twice in one run and a
/// handle from an earlier run is unknown.
const HANDLE_BYTES: usize = 16;

/// How many contexts the server keeps: in total, and for one client
/// address. Over either bound the context used least recently (of that
/// client, or of all) is dropped; its client gets CREDPROBLEM on its next
/// call and establishes a new one. A context never completed counts too:
/// a client that starts contexts and never finishes them only evicts its
/// own.
#[derive(Debug, Clone, Copy)]
pub struct ContextLimits {
    pub total_max: usize,
    pub per_client_max: usize,
}

impl Default for ContextLimits {
    /// The Linux client keeps one context per user and one for the
    /// machine: a login node of a few hundred users stays within a client's
    /// bound.
    fn default() -> Self {
        ContextLimits { total_max: 16384, per_client_max: 1024 }
    }
}

/// Why the server's GSS-API credential could not be had.
#[derive(Debug, thiserror::Error)]
pub enum AcceptorError {
    #[error("{principal:?} is not a principal GSS-API can read: {error}")]
    BadName { principal: String, error: GssStatus },
    #[error("no key for {principal:?} in the keytab (GSS-API: {error})")]
    NoKey { principal: String, error: GssStatus },
}

/// The server's Kerberos credential: its key for `principal`, from the
/// keytab GSS-API was pointed at (the server binary registers the
/// configured keytab before this is made).
pub struct Acceptor {
    cred: AcceptorCred,
    principal: String,
}

impl Acceptor {
    /// `principal` as configured: `service/host` (a host-based service
    /// name: any realm's key for it in the keytab) or `service/host@REALM`.
    pub fn acquire(principal: &str) -> Result<Acceptor, AcceptorError> {
        let cred = match principal.split_once('/') {
            Some((service, host)) if !principal.contains('@') => {
                AcceptorCred::acquire(&format!("{service}@{host}"), NameKind::HostBasedService)
            }
            _ => AcceptorCred::acquire(principal, NameKind::Principal),
        };
        let principal = principal.to_owned();
        match cred {
            Ok(cred) => Ok(Acceptor { cred, principal }),
            Err((error, true)) => Err(AcceptorError::BadName { principal, error }),
            Err((error, false)) => Err(AcceptorError::NoKey { principal, error }),
        }
    }

    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// One step of GSS-API's establishment of `context` with the client's
    /// `token`.
    pub fn step(&self, context: &mut AcceptContext, token: &[u8]) -> Result<AcceptStep, GssStatus> {
        context.step(&self.cred, token)
    }
}

/// What becomes of a call with an RPCSEC_GSS credential.
pub enum GssVerdict {
    /// A context call (INIT, CONTINUE_INIT, DESTROY), answered here.
    Reply(ReplySegments),
    /// No reply: a replay, or a number below the window.
    Drop,
    /// Refused for its credential.
    Deny(AuthStat),
    /// Accepted, but its body is not what its service promises.
    GarbageArgs(OpaqueAuth),
    /// A data call to run: its caller and its arguments in the clear.
    Data(GssCall),
}

/// One RPCSEC_GSS_DATA call, accepted: the caller, the arguments as the
/// program reads them, and what wraps its reply.
pub struct GssCall {
    pub credential: Credential,
    pub args: Bytes,
    context: Arc<Context>,
    /// The context's sealer, used without the context's lock.
    sealer: Arc<dyn Sealer>,
    seq_num: u32,
    service: GssService,
}

impl GssCall {
    /// Who the call is from, for the reply cache: its context, which
    /// names one principal.
    pub fn context_handle(&self) -> &[u8] {
        &self.context.handle
    }

    pub fn service(&self) -> GssService {
        self.service
    }

    /// The reply's body as its service wants it: `results` (the
    /// procedure's results, in the clear) as they are, checksummed, or
    /// encrypted, each with the call's sequence number. `None`: GSS-API
    /// failed; the caller answers SYSTEM_ERR.
    pub fn wrap_results(&self, results: &[u8]) -> Option<Bytes> {
        self.seal_results(results.len(), |out| {
            out.extend_from_slice(results);
            Some(())
        })
    }

    /// [`Self::wrap_results`] of the results `write_results` appends to
    /// the buffer it is given (`results_len` bytes, XDR: a multiple of
    /// four), in that buffer: the results are written once, where they
    /// are sent from, the checksum taken over them there (RFC 2203's
    /// rpc_gss_integ_data: its databody is the sequence number then the
    /// results) or the Wrap token made around them there (RFC 4121:
    /// header, then confounder, sequence number, results and the header
    /// again, encrypted in place). `None` also if `write_results` fails.
    pub fn seal_results(
        &self,
        results_len: usize,
        write_results: impl FnOnce(&mut Vec<u8>) -> Option<()>,
    ) -> Option<Bytes> {
        let seq = self.seq_num.to_be_bytes();
        let mut out;
        match self.service {
            GssService::None => {
                out = Vec::with_capacity(results_len);
                write_results(&mut out)?;
            }
            GssService::Integrity => {
                // databody's length, the databody, then the checksum as
                // an opaque.
                out = Vec::with_capacity(8 + results_len + SEALED_TAIL_BYTES);
                out.extend_from_slice(&[0; 4]);
                out.extend_from_slice(&seq);
                write_results(&mut out)?;
                let databody = out.len() - 4;
                out[..4].copy_from_slice(&u32::try_from(databody).ok()?.to_be_bytes());
                out.resize(out.len() + padding(databody), 0);
                let checksum = self.sealer.get_mic(&out[4..4 + databody])?;
                out.extend_from_slice(&u32::try_from(checksum.len()).ok()?.to_be_bytes());
                out.extend_from_slice(&checksum);
                out.resize(out.len() + padding(checksum.len()), 0);
            }
            GssService::Privacy => {
                // The token as an opaque: its length, then the token
                // made around the sequence number and the results.
                let (before, after) = self.sealer.wrap_room();
                out = Vec::with_capacity(4 + before + 4 + results_len + after + SEALED_TAIL_BYTES);
                out.resize(4 + before, 0);
                out.extend_from_slice(&seq);
                write_results(&mut out)?;
                self.sealer.wrap_in_place(&mut out, 4)?;
                let token = out.len() - 4;
                out[..4].copy_from_slice(&u32::try_from(token).ok()?.to_be_bytes());
                out.resize(out.len() + padding(token), 0);
            }
        }
        Some(Bytes::from(out))
    }
}

/// Room past the results for what sealing adds at most (a MIC token, or
/// GSS-API's Wrap token's growth, with their lengths and padding), so the
/// buffer holding a 1 MiB READ is not moved.
const SEALED_TAIL_BYTES: usize = 256;

/// XDR's padding of `len` bytes to a multiple of four.
fn padding(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// The verifier of the replies to one call: the MIC of its sequence
/// number, computed when the call was accepted.
#[derive(Debug)]
struct SignedReply(OpaqueAuth);

impl SecurityContext for SignedReply {
    fn reply_verifier(&self) -> OpaqueAuth {
        self.0.clone()
    }
}

/// The local user a principal names: `user@REALM` of the server's own
/// realm (`target`'s, the principal the client's ticket is for) is the
/// local `user`; a user of another realm (trusted or not: its `alice` is
/// not ours), a machine or a service (`host/...`, `nfs/...`) is nobody in
/// particular (idmapd's default: only the local realm maps).
fn local_user<'a>(source: &'a str, target: &str) -> Option<&'a str> {
    let (user, realm) = source.rsplit_once('@')?;
    let (_, own_realm) = target.rsplit_once('@')?;
    (!user.is_empty() && !user.contains('/') && realm == own_realm).then_some(user)
}

/// The local user of a principal: the one the configuration gives it,
/// else [`local_user`]'s.
fn mapped_user<'a>(source: &'a str, target: &str, configured: &'a HashMap<String, String>) -> Option<&'a str> {
    configured.get(source).map(String::as_str).or_else(|| local_user(source, target))
}

struct Context {
    handle: [u8; HANDLE_BYTES],
    client: IpAddr,
    /// Milliseconds since the table's epoch when last used.
    last_used_ms: AtomicU64,
    inner: Mutex<ContextInner>,
}

struct ContextInner {
    /// GSS-API's context while it is established; its keys then go to
    /// the established context's sealer.
    accepting: Option<AcceptContext>,
    window: SeqWindow,
    established: Option<Established>,
}

/// A context once GSS-API completed it.
struct Established {
    principal: String,
    ids: Option<Cred>,
    expires: Instant,
    sealer: Arc<dyn Sealer>,
}

#[derive(Default)]
struct ContextTable {
    contexts: HashMap<[u8; HANDLE_BYTES], Arc<Context>>,
    per_client: HashMap<IpAddr, usize>,
}

impl ContextTable {
    fn remove(&mut self, handle: &[u8; HANDLE_BYTES]) -> Option<Arc<Context>> {
        let ctx = self.contexts.remove(handle)?;
        if let Some(n) = self.per_client.get_mut(&ctx.client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&ctx.client);
            }
        }
        Some(ctx)
    }

    /// The least recently used context, of `client` if given.
    fn least_recent(&self, client: Option<IpAddr>) -> Option<[u8; HANDLE_BYTES]> {
        self.contexts
            .values()
            .filter(|c| client.is_none_or(|ip| c.client == ip))
            .min_by_key(|c| c.last_used_ms.load(Ordering::Relaxed))
            .map(|c| c.handle)
    }
}

/// RPCSEC_GSS for every program of a dispatcher.
pub struct GssServer {
    acceptor: Acceptor,
    privileged: Privileged,
    identities: IdentityCache,
    /// Principals given a local user by the configuration (machines,
    /// other realms), as idmapd.conf's [Static] section.
    principal_users: HashMap<String, String>,
    limits: ContextLimits,
    table: Mutex<ContextTable>,
    epoch: Instant,
    handle_prefix: u64,
    next_handle: AtomicU64,
    counts: Arc<GssCounts>,
}

impl GssServer {
    /// `privileged` runs GSS-API's keytab reads: at every context
    /// establishment GSS-API reads the keytab (and writes its replay cache,
    /// and reads krb5.conf again to name the peer), all root's.
    pub fn new(
        acceptor: Acceptor,
        identities: IdentityCache,
        limits: ContextLimits,
        privileged: Privileged,
    ) -> GssServer {
        GssServer {
            acceptor,
            privileged,
            identities,
            principal_users: HashMap::new(),
            limits,
            table: Mutex::new(ContextTable::default()),
            epoch: Instant::now(),
            handle_prefix: RandomState::new().build_hasher().finish(),
            next_handle: AtomicU64::new(1),
            counts: Arc::new(GssCounts::default()),
        }
    }

    /// Also maps each principal of `users` (full, with its realm) to the
    /// local user named: a machine's credential or another realm's user
    /// acts as that user instead of the export's anonymous identity.
    pub fn with_principal_users(mut self, users: HashMap<String, String>) -> GssServer {
        self.principal_users = users;
        self
    }

    pub fn principal(&self) -> &str {
        self.acceptor.principal()
    }

    /// Contexts established and failures by cause, for statistics.
    pub fn counts(&self) -> &Arc<GssCounts> {
        &self.counts
    }

    /// Contexts held now.
    pub fn contexts(&self) -> usize {
        self.table.lock().expect("context table lock").contexts.len()
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn deny(&self, cause: AuthFailure, stat: AuthStat) -> GssVerdict {
        self.counts.failed(cause);
        GssVerdict::Deny(stat)
    }

    /// What to do with a call whose credential is RPCSEC_GSS. `record` is
    /// the whole call (its header is checksummed), `args` what follows
    /// the header.
    pub fn accept(&self, header: &CallHeader, record: &Bytes, args: Bytes, peer: SocketAddr) -> GssVerdict {
        let Ok(cred) = GssCred::decode(header.cred.body.clone()) else {
            return self.deny(AuthFailure::BadCred, AuthStat::BadCred);
        };
        match cred.proc_ {
            GssProc::Init | GssProc::ContinueInit => self.establish(header, &cred, args, peer),
            GssProc::Data | GssProc::Destroy => self.data(header, &cred, record, args),
        }
    }

    /// RPCSEC_GSS_INIT and _CONTINUE_INIT (section 5.2).
    fn establish(&self, header: &CallHeader, cred: &GssCred, args: Bytes, peer: SocketAddr) -> GssVerdict {
        if header.proc_ != 0 {
            return self.deny(AuthFailure::BadCred, AuthStat::BadCred);
        }
        let Ok(token) = decode_init_arg(args) else {
            self.counts.failed(AuthFailure::BadToken);
            return GssVerdict::GarbageArgs(OpaqueAuth::default());
        };
        let context = match cred.proc_ {
            GssProc::Init => self.new_context(peer.ip()),
            _ => match self.lookup(&cred.handle) {
                Some(c) if c.client == peer.ip() => c,
                _ => return self.deny(AuthFailure::UnknownContext, AuthStat::GssCredProblem),
            },
        };
        let mut inner = context.inner.lock().expect("context lock");
        if inner.established.is_some() {
            return self.deny(AuthFailure::BadCred, AuthStat::BadCred);
        }
        let Some(accepting) = inner.accepting.as_mut() else {
            return self.deny(AuthFailure::BadCred, AuthStat::BadCred);
        };
        let mut step = None;
        (self.privileged)(&mut || step = Some(self.acceptor.step(accepting, &token)));
        let step = step.expect("privileged runs its closure");
        let mut res = GssInitRes { handle: Bytes::copy_from_slice(&context.handle), ..Default::default() };
        let mut verf = OpaqueAuth::default();
        match step {
            Err(e) => {
                tracing::debug!(%peer, error = %e, "GSS context establishment refused");
                self.counts.failed(AuthFailure::BadToken);
                drop(inner);
                self.table.lock().expect("context table lock").remove(&context.handle);
                res = GssInitRes { gss_major: e.major, gss_minor: e.minor, ..Default::default() };
            }
            Ok(out) => {
                res.gss_token = Bytes::from(out.token);
                if !out.complete {
                    res.gss_major = GSS_S_CONTINUE_NEEDED;
                } else {
                    // GSS-API reads krb5.conf again to name the peer, and
                    // the user database is read: as the server too.
                    let mut accepting = inner.accepting.take();
                    let mut completed = None;
                    (self.privileged)(&mut || completed = accepting.take().map(|a| self.complete(a)));
                    match completed.expect("privileged runs its closure") {
                        Ok(established) => {
                            let Some(mic) = established.sealer.get_mic(&SEQ_WINDOW.to_be_bytes()) else {
                                return GssVerdict::Drop;
                            };
                            let in_process = established.sealer.in_process();
                            let enctype = established.sealer.enctype();
                            let principal = &established.principal;
                            tracing::debug!(%peer, %principal, in_process, ?enctype, "GSS context established");
                            if in_process {
                                self.counts.sealed_in_process();
                            }
                            inner.established = Some(established);
                            self.counts.established();
                            res.seq_window = SEQ_WINDOW;
                            verf = OpaqueAuth { flavor: RPCSEC_GSS, body: Bytes::from(mic) };
                        }
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "GSS context unusable");
                            self.counts.failed(AuthFailure::BadToken);
                            drop(inner);
                            self.table.lock().expect("context table lock").remove(&context.handle);
                            res = GssInitRes { gss_major: e.major, gss_minor: e.minor, ..Default::default() };
                        }
                    }
                }
            }
        }
        let mut enc = Encoder::with_capacity(256 + res.gss_token.len());
        encode_reply_header_with(&mut enc, header.xid, &verf, ReplyStat::Accepted(AcceptStat::Success));
        res.encode(&mut enc);
        GssVerdict::Reply(enc.finish())
    }

    /// Who a completed context names, until when it holds, and what
    /// makes its tokens from now on.
    fn complete(&self, accepting: AcceptContext) -> Result<Established, GssStatus> {
        let names = accepting.names()?;
        let ids = mapped_user(&names.source, &names.target, &self.principal_users)
            .and_then(|user| self.identities.lookup(user));
        let expires = Instant::now().checked_add(names.lifetime).unwrap_or_else(far_future);
        let sealer = sealer::for_context(accepting)?;
        Ok(Established { principal: names.source, ids, expires, sealer: Arc::from(sealer) })
    }

    fn new_context(&self, client: IpAddr) -> Arc<Context> {
        let n = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let mut handle = [0; HANDLE_BYTES];
        handle[..8].copy_from_slice(&self.handle_prefix.to_be_bytes());
        handle[8..].copy_from_slice(&n.to_be_bytes());
        let context = Arc::new(Context {
            handle,
            client,
            last_used_ms: AtomicU64::new(self.now_ms()),
            inner: Mutex::new(ContextInner {
                accepting: Some(AcceptContext::default()),
                window: SeqWindow::default(),
                established: None,
            }),
        });
        let mut table = self.table.lock().expect("context table lock");
        if table.per_client.get(&client).copied().unwrap_or(0) >= self.limits.per_client_max
            && let Some(oldest) = table.least_recent(Some(client))
        {
            table.remove(&oldest);
            self.counts.evicted();
        }
        if table.contexts.len() >= self.limits.total_max
            && let Some(oldest) = table.least_recent(None)
        {
            table.remove(&oldest);
            self.counts.evicted();
        }
        table.contexts.insert(handle, context.clone());
        *table.per_client.entry(client).or_default() += 1;
        context
    }

    fn lookup(&self, handle: &[u8]) -> Option<Arc<Context>> {
        let handle: [u8; HANDLE_BYTES] = handle.try_into().ok()?;
        let context = self.table.lock().expect("context table lock").contexts.get(&handle).cloned()?;
        context.last_used_ms.store(self.now_ms(), Ordering::Relaxed);
        Some(context)
    }

    /// RPCSEC_GSS_DATA and _DESTROY (section 5.3 and 5.4).
    fn data(&self, header: &CallHeader, cred: &GssCred, record: &Bytes, args: Bytes) -> GssVerdict {
        let Some(context) = self.lookup(&cred.handle) else {
            return self.deny(AuthFailure::UnknownContext, AuthStat::GssCredProblem);
        };
        if header.verf.flavor != RPCSEC_GSS {
            return self.deny(AuthFailure::BadVerifier, AuthStat::BadVerf);
        }
        // The context's lock covers its state only (what it is, its
        // window); checksums and unwrapping go without it, so the calls of
        // one context (one user's, for the Linux client) run in parallel.
        let (principal, ids, sealer) = {
            let inner = context.inner.lock().expect("context lock");
            let Some(established) = &inner.established else {
                return self.deny(AuthFailure::UnknownContext, AuthStat::GssCredProblem);
            };
            if established.expires <= Instant::now() {
                drop(inner);
                self.table.lock().expect("context table lock").remove(&context.handle);
                return self.deny(AuthFailure::Expired, AuthStat::GssCredProblem);
            }
            (established.principal.clone(), established.ids, established.sealer.clone())
        };
        let checked = header_bytes_through_cred(header.cred.body.len());
        if record.len() < checked || !sealer.verify_mic(&record[..checked], &header.verf.body) {
            return self.deny(AuthFailure::BadChecksum, AuthStat::GssCredProblem);
        }
        if cred.seq_num >= MAXSEQ {
            return self.deny(AuthFailure::SequenceExhausted, AuthStat::GssCtxProblem);
        }
        if !context.inner.lock().expect("context lock").window.accept(cred.seq_num) {
            self.counts.failed(AuthFailure::Replayed);
            return GssVerdict::Drop;
        }
        let Some(mic) = sealer.get_mic(&cred.seq_num.to_be_bytes()) else { return GssVerdict::Drop };
        let verf = OpaqueAuth { flavor: RPCSEC_GSS, body: Bytes::from(mic) };
        if cred.proc_ == GssProc::Destroy {
            self.table.lock().expect("context table lock").remove(&context.handle);
            let mut enc = Encoder::with_capacity(128);
            encode_reply_header_with(&mut enc, header.xid, &verf, ReplyStat::Accepted(AcceptStat::Success));
            return GssVerdict::Reply(enc.finish());
        }
        let args = match cred.service {
            GssService::None => args,
            GssService::Integrity => match unwrap_integ(sealer.as_ref(), args, cred.seq_num) {
                Some(args) => args,
                None => {
                    self.counts.failed(AuthFailure::BadBody);
                    return GssVerdict::GarbageArgs(verf);
                }
            },
            GssService::Privacy => match unwrap_priv(sealer.as_ref(), args, cred.seq_num) {
                Some(args) => args,
                None => {
                    self.counts.failed(AuthFailure::BadBody);
                    return GssVerdict::GarbageArgs(verf);
                }
            },
        };
        let credential = Credential::gss(principal, cred.service, ids).with_context(Arc::new(SignedReply(verf)));
        GssVerdict::Data(GssCall { credential, args, context, sealer, seq_num: cred.seq_num, service: cred.service })
    }
}

/// A lifetime past what an Instant holds (GSS_C_INDEFINITE): a century.
fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(100 * 365 * 86_400)
}

/// The arguments of an integrity body whose checksum verifies and whose
/// sequence number is the credential's.
fn unwrap_integ(sealer: &dyn Sealer, body: Bytes, seq_num: u32) -> Option<Bytes> {
    let len = body.len();
    let integ = IntegData::decode(body, len).ok()?;
    sealer.verify_mic(&integ.databody, &integ.checksum).then_some(())?;
    let (seq, args) = split_seq_num(integ.databody).ok()?;
    (seq == seq_num).then_some(args)
}

/// The arguments of a privacy body that unwraps, with the credential's
/// sequence number. Whether the token was sealed or only signed is not
/// checked (nor does knfsd check it): a token of either kind needs the
/// context's key, so only the client itself could send its arguments
/// unencrypted; the reply is always sealed.
fn unwrap_priv(sealer: &dyn Sealer, body: Bytes, seq_num: u32) -> Option<Bytes> {
    let len = body.len();
    let token = decode_priv_data(body, len).ok()?;
    let clear = sealer.unwrap(&token)?;
    let (seq, args) = split_seq_num(Bytes::from(clear)).ok()?;
    (seq == seq_num).then_some(args)
}

/// Reads what an RPCSEC_GSS reply's results are under `service`, as the
/// client side does: for tests and tools that call a GSS server.
pub fn results_in_clear(
    service: GssService,
    body: Bytes,
    seq_num: u32,
    unwrap: impl FnOnce(&[u8]) -> Option<Vec<u8>>,
    verify: impl FnOnce(&[u8], &[u8]) -> bool,
) -> Option<Bytes> {
    match service {
        GssService::None => Some(body),
        GssService::Integrity => {
            let mut dec = Decoder::new(body);
            let integ = IntegData::decode(dec.rest(), dec.remaining()).ok()?;
            dec = Decoder::new(integ.databody.clone());
            let seq = dec.u32().ok()?;
            (seq == seq_num && verify(&integ.databody, &integ.checksum)).then(|| dec.rest())
        }
        GssService::Privacy => {
            let len = body.len();
            let token = decode_priv_data(body, len).ok()?;
            let clear = Bytes::from(unwrap(&token)?);
            let (seq, results) = split_seq_num(clear).ok()?;
            (seq == seq_num).then_some(results)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex, mpsc};
    use std::time::{Duration, Instant};

    use super::{
        Context, ContextInner, Credential, Established, GssCall, GssService, HANDLE_BYTES, SeqWindow, local_user,
        mapped_user,
    };
    use crate::gss::krb5::CfxAcceptor;
    use crate::sys::{LucidKeyBytes, LucidKeys};

    const SERVER: &str = "nfs/server.keel.test@KEEL.TEST";

    #[test]
    fn only_users_of_the_server_s_realm_are_local_users() {
        assert_eq!(local_user("alice@KEEL.TEST", SERVER), Some("alice"));
        // The same short name in a realm the server's realm trusts, in a
        // realm whose name differs only in case, and with no realm.
        assert_eq!(local_user("alice@OTHER.TEST", SERVER), None);
        assert_eq!(local_user("alice@keel.test", SERVER), None);
        assert_eq!(local_user("alice@KEEL.TEST.OTHER", SERVER), None);
        assert_eq!(local_user("alice", SERVER), None);
        // Machines and services, of any realm.
        assert_eq!(local_user("host/client.keel.test@KEEL.TEST", SERVER), None);
        assert_eq!(local_user("nfs/client.keel.test@KEEL.TEST", SERVER), None);
        assert_eq!(local_user("@KEEL.TEST", SERVER), None);
    }

    #[test]
    fn a_configured_principal_maps_to_its_user_before_the_realm_rule() {
        let configured: HashMap<String, String> =
            [("host/node1.keel.test@KEEL.TEST", "batch"), ("alice@OTHER.TEST", "alice2"), ("bob@KEEL.TEST", "robert")]
                .into_iter()
                .map(|(p, u)| (p.to_owned(), u.to_owned()))
                .collect();
        let user = |p| mapped_user(p, SERVER, &configured);
        assert_eq!(user("host/node1.keel.test@KEEL.TEST"), Some("batch"));
        assert_eq!(user("alice@OTHER.TEST"), Some("alice2"));
        assert_eq!(user("bob@KEEL.TEST"), Some("robert"), "the configuration wins over the realm rule");
        // Only the exact principal: another host, the realm in another case.
        assert_eq!(user("host/node2.keel.test@KEEL.TEST"), None);
        assert_eq!(user("host/node1.keel.test@keel.test"), None);
        assert_eq!(user("alice@KEEL.TEST"), Some("alice"), "unlisted principals follow the realm rule");
    }

    /// A data call on an established context whose tokens are made in
    /// process (keys of the shape GSS-API exports).
    fn call_on_established_context(service: GssService) -> GssCall {
        let key = |b: u8| LucidKeyBytes { enctype: 18, bytes: (0..32u8).map(|i| i ^ b).collect() };
        let keys = LucidKeys {
            protocol: 1,
            send_seq: 0,
            have_acceptor_subkey: true,
            ctx_key: key(1),
            acceptor_subkey: key(2),
        };
        let sealer = CfxAcceptor::new(&keys).unwrap();
        let context = Arc::new(Context {
            handle: [0; HANDLE_BYTES],
            client: "127.0.0.1".parse().unwrap(),
            last_used_ms: AtomicU64::new(0),
            inner: Mutex::new(ContextInner {
                accepting: None,
                window: SeqWindow::default(),
                established: Some(Established {
                    principal: "alice@KEEL.TEST".into(),
                    ids: None,
                    expires: Instant::now() + Duration::from_secs(3600),
                    sealer: Arc::new(sealer),
                }),
            }),
        });
        let sealer = context.inner.lock().unwrap().established.as_ref().unwrap().sealer.clone();
        GssCall {
            credential: Credential::gss("alice@KEEL.TEST", service, None),
            args: Default::default(),
            context,
            sealer,
            seq_num: 5,
            service,
        }
    }

    /// The Linux client has one context per user: sealing one call's
    /// reply (milliseconds for a 1 MiB READ) must not wait for whatever
    /// else holds the context, e.g. another call's sequence window check.
    #[test]
    fn a_reply_is_sealed_while_its_context_is_held_elsewhere() {
        for service in [GssService::Integrity, GssService::Privacy] {
            let call = call_on_established_context(service);
            let held = call.context.inner.lock().unwrap();
            let (sealed_tx, sealed) = mpsc::channel();
            std::thread::scope(|s| {
                s.spawn(|| sealed_tx.send(call.wrap_results(&[7; 4096]).is_some()));
                // Only a guard against a test that hangs: the seal needs
                // no lock, so it ends without `held` being released.
                let outcome = sealed.recv_timeout(Duration::from_secs(20));
                drop(held);
                assert_eq!(outcome, Ok(true), "{service:?}: sealing waited for the context's lock");
            });
        }
    }
}
