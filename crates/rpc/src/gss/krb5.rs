//! Kerberos V5 per-message tokens in process, as knfsd does them in the
//! kernel: once GSS-API has established a context and handed over its
//! keys (the lucid context), MIC and Wrap tokens (RFC 4121 section 4.2)
//! are made and checked here, with aes128- and aes256-cts-hmac-sha1-96
//! (RFC 3962) under RFC 3961's simplified profile. AES and SHA-1 come
//! from RustCrypto's crates, which use the CPU's AES and SHA instructions
//! when it has them (MIT's libk5crypto as Debian builds it does not).
//! Only the RFCs' constructions are here: n-fold, key derivation, the
//! profile's encrypt-then-checksum and the token framing.

use std::sync::atomic::{AtomicU64, Ordering};

use aes::{Aes128, Aes256};
use cts::cipher::{BlockCipherEncrypt, InnerIvInit, KeyInit};
use cts::{CbcCs3, Decrypt, Encrypt};
use hmac::{Hmac, Mac};
use sha1::Sha1;

use crate::sys::LucidKeys;

/// The enctypes done here (RFC 3962 section 7).
pub const AES128_CTS_HMAC_SHA1_96: i32 = 17;
pub const AES256_CTS_HMAC_SHA1_96: i32 = 18;

/// Key usages of RFC 4121 section 2.
const ACCEPTOR_SEAL: u32 = 22;
const ACCEPTOR_SIGN: u32 = 23;
const INITIATOR_SEAL: u32 = 24;
const INITIATOR_SIGN: u32 = 25;

/// RFC 3961 section 5.3: the derived keys' constants, after the usage.
const KC: u8 = 0x99;
const KE: u8 = 0xaa;
const KI: u8 = 0x55;

const BLOCK: usize = 16;
/// RFC 3962 section 6: the confounder is one block; HMAC-SHA1-96 keeps
/// the first 96 bits.
const CONFOUNDER: usize = BLOCK;
const CHECKSUM: usize = 12;

/// RFC 4121 section 4.2.2: token identifiers, flags and the header's size.
const TOK_MIC: [u8; 2] = [0x04, 0x04];
const TOK_WRAP: [u8; 2] = [0x05, 0x04];
const FLAG_SENT_BY_ACCEPTOR: u8 = 0x01;
const FLAG_SEALED: u8 = 0x02;
const FLAG_ACCEPTOR_SUBKEY: u8 = 0x04;
const HEADER: usize = 16;
/// What a Wrap token puts before the message (its header, then the
/// confounder) and after it (the header's copy, then the checksum).
pub const WRAP_PREFIX: usize = HEADER + CONFOUNDER;
pub const WRAP_SUFFIX: usize = HEADER + CHECKSUM;

/// Why the keys of an exported context cannot be used here.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the context uses RFC 1964 tokens, not RFC 4121's")]
    NotCfx,
    #[error("enctype {0} is not aes128- or aes256-cts-hmac-sha1-96")]
    Enctype(u32),
    #[error("a key of {0} bytes for its enctype")]
    Length(usize),
}

/// n-fold (RFC 3961 section 5.1): `input` stretched or folded to
/// `out_len` bytes. The input is repeated to the least common multiple of
/// both lengths, each copy rotated right 13 bits more than the one
/// before; the out_len-byte pieces of that are added in one's-complement
/// arithmetic (the carry out of the top added back at the bottom).
pub fn n_fold(input: &[u8], out_len: usize) -> Vec<u8> {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let lcm = input.len() * out_len / gcd(input.len(), out_len);
    let bits = input.len() * 8;
    let bit = |i: usize| (input[i / 8] >> (7 - i % 8)) & 1;
    let mut repeated = vec![0u8; lcm];
    for copy in 0..lcm / input.len() {
        let rotation = 13 * copy % bits;
        for j in 0..bits {
            // Rotated right: bit j of the copy is bit j - rotation of the input.
            let at = copy * bits + j;
            repeated[at / 8] |= bit((j + bits - rotation) % bits) << (7 - at % 8);
        }
    }
    let mut sum = vec![0u8; out_len];
    let mut carry = 0u32;
    for piece in repeated.chunks(out_len) {
        for (s, p) in sum.iter_mut().zip(piece).rev() {
            carry += u32::from(*s) + u32::from(*p);
            *s = carry as u8;
            carry >>= 8;
        }
        // End-around carry, until none is left.
        while carry != 0 {
            for s in sum.iter_mut().rev() {
                carry += u32::from(*s);
                *s = carry as u8;
                carry >>= 8;
            }
        }
    }
    sum
}

/// An AES key of either size.
#[derive(Clone)]
enum AesKey {
    Aes128(Aes128),
    Aes256(Aes256),
}

impl AesKey {
    fn new(bytes: &[u8]) -> Result<AesKey, KeyError> {
        match bytes.len() {
            16 => Ok(AesKey::Aes128(Aes128::new_from_slice(bytes).map_err(|_| KeyError::Length(16))?)),
            32 => Ok(AesKey::Aes256(Aes256::new_from_slice(bytes).map_err(|_| KeyError::Length(32))?)),
            n => Err(KeyError::Length(n)),
        }
    }

    fn len(&self) -> usize {
        match self {
            AesKey::Aes128(_) => 16,
            AesKey::Aes256(_) => 32,
        }
    }

    fn encrypt_block(&self, block: &mut [u8; BLOCK]) {
        let b = block.into();
        match self {
            AesKey::Aes128(k) => k.encrypt_block(b),
            AesKey::Aes256(k) => k.encrypt_block(b),
        }
    }

    /// AES-CBC with ciphertext stealing, the last two blocks swapped
    /// (RFC 3962 section 5: NIST's CBC-CS3), IV zero. `data` holds at
    /// least two blocks: a token's always does (confounder and header).
    fn encrypt_cts(&self, data: &mut [u8]) {
        debug_assert!(data.len() > BLOCK);
        let iv = [0u8; BLOCK].into();
        let done = match self {
            AesKey::Aes128(k) => CbcCs3::inner_iv_init(k, &iv).encrypt(data),
            AesKey::Aes256(k) => CbcCs3::inner_iv_init(k, &iv).encrypt(data),
        };
        done.expect("more than a block");
    }

    fn decrypt_cts(&self, data: &mut [u8]) {
        debug_assert!(data.len() > BLOCK);
        let iv = [0u8; BLOCK].into();
        let done = match self {
            AesKey::Aes128(k) => CbcCs3::inner_iv_init(k, &iv).decrypt(data),
            AesKey::Aes256(k) => CbcCs3::inner_iv_init(k, &iv).decrypt(data),
        };
        done.expect("more than a block");
    }

    /// DK(key, usage | kind) (RFC 3961 section 5.1): the blocks
    /// E(n-fold(constant)), E(that), ... up to the key's length. One
    /// block under CBC-CS3 with IV zero is AES of that block; AES's
    /// random-to-key is the identity (RFC 3962 section 6).
    fn derive(&self, usage: u32, kind: u8) -> Vec<u8> {
        let mut constant = usage.to_be_bytes().to_vec();
        constant.push(kind);
        let mut block: [u8; BLOCK] = n_fold(&constant, BLOCK).try_into().expect("one block");
        let mut key = Vec::with_capacity(self.len());
        while key.len() < self.len() {
            self.encrypt_block(&mut block);
            key.extend_from_slice(&block);
        }
        key.truncate(self.len());
        key
    }
}

/// HMAC-SHA1-96 under one derived key, keyed once.
#[derive(Clone)]
struct Checksum(Hmac<Sha1>);

impl Checksum {
    fn new(key: &[u8]) -> Checksum {
        Checksum(Hmac::new_from_slice(key).expect("HMAC takes any key"))
    }

    fn of(&self, parts: &[&[u8]]) -> [u8; CHECKSUM] {
        let mut mac = self.0.clone();
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes()[..CHECKSUM].try_into().expect("SHA-1 is 20 bytes")
    }

    /// In constant time.
    fn verifies(&self, parts: &[&[u8]], checksum: &[u8]) -> bool {
        let mut mac = self.0.clone();
        for p in parts {
            mac.update(p);
        }
        checksum.len() == CHECKSUM && mac.verify_truncated_left(checksum).is_ok()
    }
}

/// The keys of one direction of a context: Kc of the sign usage (MIC
/// tokens), Ke, Ki and Kc of the seal usage (Wrap tokens).
#[derive(Clone)]
struct DirectionKeys {
    mic: Checksum,
    seal: AesKey,
    seal_integrity: Checksum,
    wrap_checksum: Checksum,
}

impl DirectionKeys {
    fn derive(base: &AesKey, seal: u32, sign: u32) -> Result<DirectionKeys, KeyError> {
        Ok(DirectionKeys {
            mic: Checksum::new(&base.derive(sign, KC)),
            seal: AesKey::new(&base.derive(seal, KE))?,
            seal_integrity: Checksum::new(&base.derive(seal, KI)),
            wrap_checksum: Checksum::new(&base.derive(seal, KC)),
        })
    }

    /// RFC 3961 section 5.3's encryption, in place: `out[start..]` is a
    /// confounder's room then the plaintext. A random confounder, all of
    /// it encrypted under Ke, then HMAC over the confounder and the
    /// plaintext under Ki appended; None if the kernel gives no random
    /// numbers.
    fn encrypt_in_place(&self, out: &mut Vec<u8>, start: usize) -> Option<()> {
        getrandom::fill(&mut out[start..start + CONFOUNDER]).ok()?;
        let checksum = self.seal_integrity.of(&[&out[start..]]);
        self.seal.encrypt_cts(&mut out[start..]);
        out.extend_from_slice(&checksum);
        Some(())
    }

    /// The inverse: `sealed` decrypted in place; the plaintext after the
    /// confounder, if the checksum verifies.
    fn decrypt<'a>(&self, sealed: &'a mut [u8]) -> Option<&'a [u8]> {
        if sealed.len() < CONFOUNDER + CHECKSUM + 1 {
            return None;
        }
        let (cipher, checksum) = sealed.split_at_mut(sealed.len() - CHECKSUM);
        self.seal.decrypt_cts(cipher);
        self.seal_integrity.verifies(&[cipher], checksum).then_some(&cipher[CONFOUNDER..])
    }
}

/// The RFC 4121 tokens of one acceptor context.
pub struct CfxAcceptor {
    /// Tokens the server sends: acceptor usages, under the acceptor
    /// subkey if there is one.
    send: DirectionKeys,
    /// Tokens the client sends, under the subkey their flag names:
    /// `[without the AcceptorSubkey flag, with it]`.
    receive: [Option<DirectionKeys>; 2],
    acceptor_subkey: bool,
    /// SND_SEQ of the next token sent (RFC 4121 section 4.2.6.1): the
    /// only state a token changes, so calls of one context are sealed in
    /// parallel.
    send_seq: AtomicU64,
    enctype: i32,
    /// FLAG_SENT_BY_ACCEPTOR: the flags of this side's tokens (a test
    /// plays the initiator with 0).
    sender: u8,
}

impl CfxAcceptor {
    /// The tokens of an exported context, if it is CFX with one of the
    /// enctypes done here.
    pub fn new(keys: &LucidKeys) -> Result<CfxAcceptor, KeyError> {
        if keys.protocol != 1 {
            return Err(KeyError::NotCfx);
        }
        let base = |k: &crate::sys::LucidKeyBytes| -> Result<AesKey, KeyError> {
            let expected = match k.enctype as i32 {
                AES128_CTS_HMAC_SHA1_96 => 16,
                AES256_CTS_HMAC_SHA1_96 => 32,
                _ => return Err(KeyError::Enctype(k.enctype)),
            };
            if k.bytes.len() != expected {
                return Err(KeyError::Length(k.bytes.len()));
            }
            AesKey::new(&k.bytes)
        };
        let initiator_key = base(&keys.ctx_key)?;
        let receive_initiator = DirectionKeys::derive(&initiator_key, INITIATOR_SEAL, INITIATOR_SIGN)?;
        let (send, receive, enctype) = if keys.have_acceptor_subkey {
            let subkey = base(&keys.acceptor_subkey)?;
            let send = DirectionKeys::derive(&subkey, ACCEPTOR_SEAL, ACCEPTOR_SIGN)?;
            let receive = DirectionKeys::derive(&subkey, INITIATOR_SEAL, INITIATOR_SIGN)?;
            (send, [Some(receive_initiator), Some(receive)], keys.acceptor_subkey.enctype as i32)
        } else {
            let send = DirectionKeys::derive(&initiator_key, ACCEPTOR_SEAL, ACCEPTOR_SIGN)?;
            (send, [Some(receive_initiator), None], keys.ctx_key.enctype as i32)
        };
        Ok(CfxAcceptor {
            send,
            receive,
            acceptor_subkey: keys.have_acceptor_subkey,
            send_seq: AtomicU64::new(keys.send_seq),
            enctype,
            sender: FLAG_SENT_BY_ACCEPTOR,
        })
    }

    /// The enctype of the key the server's tokens use.
    pub fn enctype(&self) -> i32 {
        self.enctype
    }

    fn header(&self, tok_id: [u8; 2], sealed: bool, fields: [u8; 4]) -> [u8; HEADER] {
        let mut flags = self.sender;
        if sealed {
            flags |= FLAG_SEALED;
        }
        if self.acceptor_subkey {
            flags |= FLAG_ACCEPTOR_SUBKEY;
        }
        let mut h = [0u8; HEADER];
        h[..2].copy_from_slice(&tok_id);
        h[2] = flags;
        h[3] = 0xff;
        h[4..8].copy_from_slice(&fields);
        h[8..].copy_from_slice(&self.send_seq.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        h
    }

    /// The keys of a token the client sent, from its header: sent by
    /// the other side, under a key this context has.
    fn received_keys(&self, header: &[u8]) -> Option<&DirectionKeys> {
        let flags = header[2];
        if flags & FLAG_SENT_BY_ACCEPTOR == self.sender {
            return None;
        }
        self.receive[usize::from(flags & FLAG_ACCEPTOR_SUBKEY != 0)].as_ref()
    }

    /// A MIC token (section 4.2.6.1): the header (filler in EC and RRC)
    /// and the checksum of `message` then the header.
    pub fn get_mic(&self, message: &[u8]) -> Vec<u8> {
        let header = self.header(TOK_MIC, false, [0xff; 4]);
        let checksum = self.send.mic.of(&[message, &header]);
        [&header[..], &checksum].concat()
    }

    pub fn verify_mic(&self, message: &[u8], token: &[u8]) -> bool {
        if token.len() != HEADER + CHECKSUM || token[..2] != TOK_MIC || token[3..8] != [0xff; 5] {
            return false;
        }
        let (header, checksum) = token.split_at(HEADER);
        match self.received_keys(header) {
            Some(keys) if header[2] & FLAG_SEALED == 0 => keys.mic.verifies(&[message, header], checksum),
            _ => false,
        }
    }

    /// A Wrap token with confidentiality (section 4.2.6.2), as MIT's and
    /// the Linux kernel's acceptors make it: EC 0 (CBC-CS3 needs no
    /// padding), RRC 0, and the encrypted data the message then a copy of
    /// the header.
    pub fn wrap(&self, message: &[u8]) -> Option<Vec<u8>> {
        let mut token = Vec::with_capacity(WRAP_PREFIX + message.len() + WRAP_SUFFIX);
        token.resize(WRAP_PREFIX, 0);
        token.extend_from_slice(message);
        self.wrap_in_place(&mut token, 0)?;
        Some(token)
    }

    /// [`Self::wrap`] in `out` itself, the message not copied:
    /// `out[at..]` is [`WRAP_PREFIX`] bytes of room then the message,
    /// and becomes the token ([`WRAP_SUFFIX`] bytes longer; with that
    /// much spare capacity `out` is not moved).
    pub fn wrap_in_place(&self, out: &mut Vec<u8>, at: usize) -> Option<()> {
        if out.len() < at + WRAP_PREFIX {
            return None;
        }
        let header = self.header(TOK_WRAP, true, [0; 4]);
        out[at..at + HEADER].copy_from_slice(&header);
        out.extend_from_slice(&header);
        self.send.encrypt_in_place(out, at + HEADER)
    }

    /// The message of a Wrap token from the client, sealed or not, with
    /// any RRC (section 4.2.5: the data after the header rotated right
    /// RRC bytes).
    pub fn unwrap(&self, token: &[u8]) -> Option<Vec<u8>> {
        if token.len() < HEADER || token[..2] != TOK_WRAP || token[3] != 0xff {
            return None;
        }
        let (header, rotated) = token.split_at(HEADER);
        let keys = self.received_keys(header)?;
        let ec = usize::from(u16::from_be_bytes([header[4], header[5]]));
        let rrc = usize::from(u16::from_be_bytes([header[6], header[7]]));
        let mut data = Vec::with_capacity(rotated.len());
        let rrc = if rotated.is_empty() { 0 } else { rrc % rotated.len() };
        data.extend_from_slice(&rotated[rrc..]);
        data.extend_from_slice(&rotated[..rrc]);
        if header[2] & FLAG_SEALED != 0 {
            // The plaintext is the message, EC bytes of filler and the
            // header again, whose fields but RRC (zero inside) must be
            // the token's (as the Linux kernel checks them).
            let plain = keys.decrypt(&mut data)?;
            let len = plain.len().checked_sub(HEADER + ec)?;
            let inner = &plain[plain.len() - HEADER..];
            if inner[..6] != header[..6] || inner[8..] != header[8..] {
                return None;
            }
            let start = CONFOUNDER;
            data.truncate(start + len);
            data.drain(..start);
            Some(data)
        } else {
            // The message then its checksum (EC its length), computed
            // over the message and the header with EC and RRC zero.
            if ec != CHECKSUM {
                return None;
            }
            let len = data.len().checked_sub(CHECKSUM)?;
            let mut zeroed: [u8; HEADER] = header.try_into().expect("a header");
            zeroed[4..8].fill(0);
            keys.wrap_checksum.verifies(&[&data[..len], &zeroed], &data[len..]).then(|| {
                data.truncate(len);
                data
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::LucidKeyBytes;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn n_fold_gives_rfc_3961_appendix_a_1_s_values() {
        let cases: [(&[u8], usize, &str); 11] = [
            (b"012345", 64, "be072631276b1955"),
            (b"password", 56, "78a07b6caf85fa"),
            (b"Rough Consensus, and Running Code", 64, "bb6ed30870b7f0e0"),
            (b"password", 168, "59e4a8ca7c0385c3c37b3f6d2000247cb6e6bd5b3e"),
            (b"MASSACHVSETTS INSTITVTE OF TECHNOLOGY", 192, "db3b0d8f0b061e603282b308a50841229ad798fab9540c1b"),
            (b"Q", 168, "518a54a215a8452a518a54a215a8452a518a54a215"),
            (b"ba", 168, "fb25d531ae8974499f52fd92ea9857c4ba24cf297e"),
            (b"kerberos", 64, "6b65726265726f73"),
            (b"kerberos", 128, "6b65726265726f737b9b5b2b93132b93"),
            (b"kerberos", 168, "8372c236344e5f1550cd0747e15d62ca7a5a3bcea4"),
            (b"kerberos", 256, "6b65726265726f737b9b5b2b93132b935c9bdcdad95c9899c4cae4dee6d6cae4"),
        ];
        for (input, bits, expected) in cases {
            assert_eq!(n_fold(input, bits / 8), hex(expected), "{bits}-fold of {:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn cbc_cs3_gives_rfc_3962_appendix_b_s_values() {
        let key = AesKey::new(&hex("636869636b656e207465726979616b69")).unwrap();
        let message = b"I would like the General Gau's Chicken, please, and wonton soup.";
        let cases = [
            (17, "c6353568f2bf8cb4d8a580362da7ff7f97"),
            (31, "fc00783e0efdb2c1d445d4c8eff7ed22 97687268d6ecccc0c07b25e25ecfe5"),
            (32, "39312523a78662d5be7fcbcc98ebf5a8 97687268d6ecccc0c07b25e25ecfe584"),
            (47, "97687268d6ecccc0c07b25e25ecfe584 b3fffd940c16a18c1b5549d2f838029e 39312523a78662d5be7fcbcc98ebf5"),
            (48, "97687268d6ecccc0c07b25e25ecfe584 9dad8bbb96c4cdc03bc103e1a194bbd8 39312523a78662d5be7fcbcc98ebf5a8"),
            (
                64,
                "97687268d6ecccc0c07b25e25ecfe584 39312523a78662d5be7fcbcc98ebf5a8 \
                 4807efe836ee89a526730dbc2f7bc840 9dad8bbb96c4cdc03bc103e1a194bbd8",
            ),
        ];
        for (len, expected) in cases {
            let mut data = message[..len].to_vec();
            key.encrypt_cts(&mut data);
            assert_eq!(data, hex(expected), "{len} bytes");
            key.decrypt_cts(&mut data);
            assert_eq!(&data[..], &message[..len], "{len} bytes back");
        }
    }

    fn lucid(enctype: u32, len: usize, acceptor_subkey: bool) -> LucidKeys {
        let key = |b: u8| LucidKeyBytes { enctype, bytes: (0..len as u8).map(|i| i ^ b).collect() };
        LucidKeys {
            protocol: 1,
            send_seq: 7,
            have_acceptor_subkey: acceptor_subkey,
            ctx_key: key(0x11),
            acceptor_subkey: if acceptor_subkey { key(0x22) } else { LucidKeyBytes { enctype: 0, bytes: vec![] } },
        }
    }

    /// The client's side of a context, for tokens the server must read:
    /// the initiator's keys, its tokens without SentByAcceptor.
    fn as_initiator(server: &CfxAcceptor) -> CfxAcceptor {
        let keys = server.receive[usize::from(server.acceptor_subkey)].clone().unwrap();
        CfxAcceptor {
            send: keys,
            receive: [None, None],
            acceptor_subkey: server.acceptor_subkey,
            send_seq: AtomicU64::new(1),
            enctype: 0,
            sender: 0,
        }
    }

    #[test]
    fn tokens_of_an_unknown_enctype_or_rfc_1964_are_refused() {
        assert!(matches!(CfxAcceptor::new(&lucid(20, 32, true)), Err(KeyError::Enctype(20))));
        assert!(matches!(CfxAcceptor::new(&lucid(18, 16, true)), Err(KeyError::Length(16))));
        let mut rfc1964 = lucid(18, 32, false);
        rfc1964.protocol = 0;
        assert!(matches!(CfxAcceptor::new(&rfc1964), Err(KeyError::NotCfx)));
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_token_fails_it() {
        for (enctype, len) in [(17, 16), (18, 32)] {
            for subkey in [false, true] {
                let server = CfxAcceptor::new(&lucid(enctype, len, subkey)).unwrap();
                let client = as_initiator(&server);
                let message = b"the arguments of one call, longer than a block";
                let mic = client.get_mic(message);
                assert!(server.verify_mic(message, &mic));
                let wrap = client.wrap(message).unwrap();
                assert_eq!(server.unwrap(&wrap).as_deref(), Some(&message[..]));
                for i in 0..mic.len() * 8 {
                    let mut bad = mic.clone();
                    bad[i / 8] ^= 1 << (i % 8);
                    assert!(!server.verify_mic(message, &bad), "MIC bit {i}");
                }
                for i in 0..wrap.len() * 8 {
                    // RRC is not protected (section 4.2.5): a changed RRC
                    // reads other bytes, which then fail.
                    let mut bad = wrap.clone();
                    bad[i / 8] ^= 1 << (i % 8);
                    assert_eq!(server.unwrap(&bad), None, "wrap bit {i} ({enctype}, subkey {subkey})");
                }
                let mut changed = message.to_vec();
                changed[3] ^= 1;
                assert!(!server.verify_mic(&changed, &mic), "another message");
                // The server's own tokens are not the client's.
                let own = server.get_mic(message);
                assert!(!server.verify_mic(message, &own));
                let own = server.wrap(message).unwrap();
                assert_eq!(server.unwrap(&own), None);
            }
        }
    }

    #[test]
    fn any_rotation_of_a_wrap_token_unwraps() {
        let server = CfxAcceptor::new(&lucid(18, 32, true)).unwrap();
        let client = as_initiator(&server);
        let message = b"rotated right by RRC bytes";
        let wrap = client.wrap(message).unwrap();
        let body = &wrap[HEADER..];
        for rrc in [0usize, 1, 12, 28, 16 + 12, body.len() - 1, body.len() + 3] {
            let r = rrc % body.len();
            let mut rotated = wrap[..HEADER].to_vec();
            rotated[6..8].copy_from_slice(&(rrc as u16).to_be_bytes());
            rotated.extend_from_slice(&body[body.len() - r..]);
            rotated.extend_from_slice(&body[..body.len() - r]);
            assert_eq!(server.unwrap(&rotated).as_deref(), Some(&message[..]), "RRC {rrc}");
        }
    }

    /// The client's view of the server's tokens: its keys to read them.
    fn peer_of(server: &CfxAcceptor) -> CfxAcceptor {
        CfxAcceptor {
            send: server.send.clone(),
            receive: [Some(server.send.clone()), Some(server.send.clone())],
            acceptor_subkey: server.acceptor_subkey,
            send_seq: AtomicU64::new(0),
            enctype: 0,
            sender: 0,
        }
    }

    #[test]
    fn tokens_made_in_parallel_on_one_context_each_get_their_own_sequence_number() {
        const THREADS: usize = 4;
        const EACH: usize = 50;
        let server = CfxAcceptor::new(&lucid(18, 32, true)).unwrap();
        let reader = peer_of(&server);
        let tokens: Vec<(Vec<u8>, Vec<u8>)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let server = &server;
                    s.spawn(move || {
                        (0..EACH)
                            .map(|i| {
                                let message = format!("reply {i} of thread {t}, longer than a block").into_bytes();
                                let token =
                                    if i % 2 == 0 { server.get_mic(&message) } else { server.wrap(&message).unwrap() };
                                (message, token)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        let mut seqs: Vec<u64> =
            tokens.iter().map(|(_, t)| u64::from_be_bytes(t[8..HEADER].try_into().unwrap())).collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs, (7..7 + (THREADS * EACH) as u64).collect::<Vec<_>>(), "one number per token, none skipped");
        for (message, token) in &tokens {
            if token[..2] == TOK_MIC {
                assert!(reader.verify_mic(message, token));
            } else {
                assert_eq!(reader.unwrap(token).as_deref(), Some(&message[..]));
            }
        }
    }
}
