//! The transport's epoll set: what is registered, with which token, and
//! how the workers are woken.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::sys;

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    /// The eventfd: a connection was queued for an idle worker, or a stop.
    Wake,
    Listener(u32),
    Datagram(u32),
    /// A connection's socket is readable: its read turn (slot, generation).
    Read(u32, u32),
    /// A connection's socket takes more of its replies.
    Write(u32, u32),
    /// The batch watch's timer: look for a batch stuck behind a call.
    Watch,
}

const KIND_SHIFT: u32 = 60;
const WAKE: u64 = 0;
const LISTENER: u64 = 1;
const DATAGRAM: u64 = 2;
const READ: u64 = 3;
const WRITE: u64 = 4;
const WATCH: u64 = 5;

impl Token {
    fn encode(self) -> u64 {
        let pair = |slot: u32, generation: u32| (u64::from(generation & 0x0fff_ffff) << 32) | u64::from(slot);
        match self {
            Token::Wake => WAKE << KIND_SHIFT,
            Token::Listener(i) => (LISTENER << KIND_SHIFT) | u64::from(i),
            Token::Datagram(i) => (DATAGRAM << KIND_SHIFT) | u64::from(i),
            Token::Read(s, g) => (READ << KIND_SHIFT) | pair(s, g),
            Token::Write(s, g) => (WRITE << KIND_SHIFT) | pair(s, g),
            Token::Watch => WATCH << KIND_SHIFT,
        }
    }

    fn decode(v: u64) -> Option<Token> {
        let (slot, generation) = (v as u32, ((v >> 32) & 0x0fff_ffff) as u32);
        Some(match v >> KIND_SHIFT {
            WAKE => Token::Wake,
            LISTENER => Token::Listener(v as u32),
            DATAGRAM => Token::Datagram(v as u32),
            READ => Token::Read(slot, generation),
            WRITE => Token::Write(slot, generation),
            WATCH => Token::Watch,
            _ => return None,
        })
    }

    /// The generation as a token carries it (28 bits).
    pub fn generation_bits(generation: u32) -> u32 {
        generation & 0x0fff_ffff
    }
}

/// Room for one event: each worker takes one thing at a time, so events
/// are spread over the workers instead of queued behind one.
pub struct Events([libc::epoll_event; 1]);

impl Events {
    pub fn new() -> Self {
        Events([libc::epoll_event { events: 0, u64: 0 }])
    }
}

pub struct Poller {
    epoll: OwnedFd,
    waker: OwnedFd,
    /// A timerfd, armed while some worker runs a batch of calls.
    watch: OwnedFd,
}

/// One-shot read interest of a connection: exactly one worker at a time.
const READ_INTEREST: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32;
const WRITE_INTEREST: u32 = (libc::EPOLLOUT | libc::EPOLLONESHOT) as u32;
/// Listeners, UDP sockets and the watch: one-shot as well, re-armed by
/// the worker that took the event. All workers wait on one epoll set, and
/// a level-triggered descriptor there wakes one waiter after another
/// until somebody consumes it: every idle worker, for each connection,
/// datagram or tick of the watch (EPOLLEXCLUSIVE only works across sets).
const SHARED_INTEREST: u32 = (libc::EPOLLIN | libc::EPOLLONESHOT) as u32;

impl Poller {
    pub fn new() -> io::Result<Self> {
        let epoll = sys::epoll_create()?;
        let waker = sys::eventfd()?;
        // Edge-triggered: each signal wakes one waiter; nobody drains it.
        let events = (libc::EPOLLIN | libc::EPOLLET) as u32;
        sys::epoll_ctl(epoll.as_fd(), libc::EPOLL_CTL_ADD, waker.as_raw_fd(), events, Token::Wake.encode())?;
        let watch = sys::timerfd()?;
        sys::epoll_ctl(epoll.as_fd(), libc::EPOLL_CTL_ADD, watch.as_raw_fd(), SHARED_INTEREST, Token::Watch.encode())?;
        Ok(Poller { epoll, waker, watch })
    }

    /// Makes the watch's timer fire every `period`, or stops it (`None`).
    pub fn set_watch(&self, period: Option<std::time::Duration>) {
        if let Err(e) = sys::timerfd_set(self.watch.as_fd(), period) {
            tracing::error!(error = %e, "cannot set the batch watch's timer");
        }
    }

    /// Takes the watch timer's expiry and arms it for the next one.
    pub fn ack_watch(&self) {
        sys::timerfd_ack(self.watch.as_fd());
        if let Err(e) = self.ctl(libc::EPOLL_CTL_MOD, self.watch.as_raw_fd(), SHARED_INTEREST, Token::Watch) {
            tracing::error!(error = %e, "cannot re-arm the batch watch's timer");
        }
    }

    /// Waits for one event; `None` for a wake-up or an interruption.
    pub fn wait(&self, events: &mut Events) -> io::Result<Option<Token>> {
        let n = sys::epoll_wait(self.epoll.as_fd(), &mut events.0, -1)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Token::decode(events.0[0].u64))
    }

    /// An event if one is there now, without sleeping.
    pub fn poll(&self, events: &mut Events) -> io::Result<Option<Token>> {
        let n = sys::epoll_wait(self.epoll.as_fd(), &mut events.0, 0)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Token::decode(events.0[0].u64))
    }

    /// Wakes one worker blocked in [`Poller::wait`].
    pub fn wake(&self) {
        sys::eventfd_signal(self.waker.as_fd());
    }

    /// Registers a listener or a UDP socket: one worker takes its event,
    /// and calls [`Poller::rearm_shared`] when done with it.
    pub fn add_shared(&self, fd: &impl AsRawFd, token: Token) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), SHARED_INTEREST, token)
    }

    /// Arms a listener or a UDP socket again; what is still waiting on it
    /// is reported at once.
    pub fn rearm_shared(&self, fd: &impl AsRawFd, token: Token) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd.as_raw_fd(), SHARED_INTEREST, token)
    }

    /// Registers a connection's socket, armed for its first read turn.
    pub fn add_read(&self, fd: &impl AsRawFd, token: Token) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), READ_INTEREST, token)
    }

    /// Arms a connection's socket for its next read turn.
    pub fn rearm_read(&self, fd: &impl AsRawFd, token: Token) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd.as_raw_fd(), READ_INTEREST, token)
    }

    /// Arms a connection's write descriptor (a duplicate of its socket, so
    /// read and write readiness are separate registrations), adding it the
    /// first time.
    pub fn arm_write(&self, fd: &impl AsRawFd, token: Token, added: bool) -> io::Result<()> {
        let op = if added { libc::EPOLL_CTL_MOD } else { libc::EPOLL_CTL_ADD };
        self.ctl(op, fd.as_raw_fd(), WRITE_INTEREST, token)
    }

    /// Takes a descriptor out of the set (errors ignored: it may not be in).
    pub fn remove(&self, fd: &impl AsRawFd) {
        let _ = sys::epoll_ctl(self.epoll.as_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), 0, 0);
    }

    fn ctl(&self, op: libc::c_int, fd: std::os::fd::RawFd, events: u32, token: Token) -> io::Result<()> {
        sys::epoll_ctl(self.epoll.as_fd(), op, fd, events, token.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for t in [
            Token::Wake,
            Token::Listener(3),
            Token::Datagram(0),
            Token::Read(7, 0x0fff_ffff),
            Token::Write(u32::MAX, 5),
            Token::Watch,
        ] {
            assert_eq!(Token::decode(t.encode()), Some(t));
        }
        assert_eq!(Token::decode(u64::MAX), None);
    }

    /// A listener's readiness goes to one waiter until it is re-armed; a
    /// level-triggered one would wake every idle worker in turn.
    #[test]
    fn a_shared_descriptor_wakes_one_waiter_until_rearmed() {
        let poller = Poller::new().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        poller.add_shared(&listener, Token::Listener(0)).unwrap();
        let _c1 = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut events = Events::new();
        assert_eq!(poller.wait(&mut events).unwrap(), Some(Token::Listener(0)));
        // Not accepted yet, so still ready: but nobody else is told.
        assert_eq!(poller.poll(&mut events).unwrap(), None);
        poller.rearm_shared(&listener, Token::Listener(0)).unwrap();
        assert_eq!(poller.poll(&mut events).unwrap(), Some(Token::Listener(0)), "re-armed: still waiting");
        listener.set_nonblocking(true).unwrap();
        listener.accept().unwrap();
        poller.rearm_shared(&listener, Token::Listener(0)).unwrap();
        assert_eq!(poller.poll(&mut events).unwrap(), None, "nothing left to accept");
    }

    #[test]
    fn the_watch_ticks_to_one_waiter_per_expiry() {
        let poller = Poller::new().unwrap();
        poller.set_watch(Some(std::time::Duration::from_millis(1)));
        let mut events = Events::new();
        assert_eq!(poller.wait(&mut events).unwrap(), Some(Token::Watch));
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(poller.poll(&mut events).unwrap(), None, "taken by the first waiter until acknowledged");
        poller.ack_watch();
        assert_eq!(poller.wait(&mut events).unwrap(), Some(Token::Watch), "the next tick");
        poller.set_watch(None);
        poller.ack_watch();
        assert_eq!(poller.poll(&mut events).unwrap(), None, "stopped");
    }
}
