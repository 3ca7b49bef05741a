/*
 * kstatd: the smallest rpcbind + rpc.statd a Linux NFS client needs to
 * mount with locking, for the busybox-only test guest.
 *
 * The guest kernel's lockd registers its ports with the local rpcbind
 * (PMAP v2 SET on 127.0.0.1:111, after an RPCBIND v4 SET that is answered
 * PROG_MISMATCH), monitors every server it locks at through the local
 * statd (SM_MON; without an answer the lock fails with ENOLCK), and relies
 * on statd to pass a server's reboot notification (SM_NOTIFY) on to it
 * (the private NLM procedure 16, from a privileged loopback port), which
 * starts the reclaim of its locks. The server finds the client's lockd for
 * GRANTED callbacks through this rpcbind too.
 *
 *   kstatd                      serve rpcbind v2 on port 111 and NSM v1
 *                               (UDP and TCP); returns once listening
 *   kstatd notify HOST NAME N   tell HOST's statd that NAME restarted with
 *                               state N (what a rebooted client sends)
 *
 * Single-threaded, poll(2); small fixed tables. Test tooling, not a daemon
 * for real use.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PMAP_PROG 100000
#define SM_PROG 100024
#define MAXMAP 64
#define MAXMON 64
#define MAXCONN 32
#define BUF 8192

struct map { uint32_t prog, vers, prot, port; };
static struct map maps[MAXMAP];
static int nmaps;

struct mon { char name[256]; uint32_t prog, vers, proc; unsigned char priv[16]; int used; };
static struct mon mons[MAXMON];
static uint32_t my_state = 1;

/* XDR reading with bounds */
struct rd { const unsigned char *p; size_t n, i; int bad; };
static uint32_t get32(struct rd *r) {
  if (r->i + 4 > r->n) { r->bad = 1; return 0; }
  uint32_t v; memcpy(&v, r->p + r->i, 4); r->i += 4; return ntohl(v);
}
static size_t getopaque(struct rd *r, unsigned char *out, size_t max) {
  uint32_t len = get32(r);
  if (r->bad || len > max || r->i + len > r->n) { r->bad = 1; return 0; }
  if (out) memcpy(out, r->p + r->i, len);
  r->i += (len + 3) & ~3u;
  if (r->i > r->n) r->bad = 1;
  return len;
}
static void getfixed(struct rd *r, unsigned char *out, size_t len) {
  if (r->i + len > r->n) { r->bad = 1; return; }
  memcpy(out, r->p + r->i, len); r->i += (len + 3) & ~3u;
}
struct wr { unsigned char b[BUF]; size_t n; };
static void put32(struct wr *w, uint32_t v) { v = htonl(v); if (w->n + 4 <= BUF) { memcpy(w->b + w->n, &v, 4); w->n += 4; } }
static void putopaque(struct wr *w, const void *d, uint32_t len) {
  put32(w, len);
  if (w->n + ((len + 3) & ~3u) > BUF) return;
  memcpy(w->b + w->n, d, len); memset(w->b + w->n + len, 0, ((len + 3) & ~3u) - len);
  w->n += (len + 3) & ~3u;
}

static void reply_head(struct wr *w, uint32_t xid, uint32_t accept) {
  put32(w, xid); put32(w, 1); put32(w, 0); put32(w, 0); put32(w, 0); put32(w, accept);
}

static uint32_t lookup(uint32_t prog, uint32_t vers, uint32_t prot) {
  for (int i = 0; i < nmaps; i++)
    if (maps[i].prog == prog && maps[i].vers == vers && maps[i].prot == prot) return maps[i].port;
  return 0;
}

static int is_local_priv(struct sockaddr_in *from) {
  return ntohl(from->sin_addr.s_addr) >> 24 == 127 && ntohs(from->sin_port) < 1024;
}

static int reserved_udp(uint32_t addr) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = addr };
  for (int p = 1023; p >= 600; p--) {
    a.sin_port = htons(p);
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0) return s;
  }
  return s;
}

/* One UDP call with a few tries; returns the reply length or -1. */
static int udp_call(int s, struct sockaddr_in *to, struct wr *call, unsigned char *out, size_t outmax) {
  struct timeval tv = { 1, 0 };
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (int t = 0; t < 3; t++) {
    sendto(s, call->b, call->n, 0, (struct sockaddr *)to, sizeof *to);
    ssize_t n = recv(s, out, outmax, 0);
    if (n >= 24) return (int)n;
  }
  return -1;
}

static void call_head(struct wr *w, uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc) {
  put32(w, xid); put32(w, 0); put32(w, 2); put32(w, prog); put32(w, vers); put32(w, proc);
  put32(w, 0); put32(w, 0); put32(w, 0); put32(w, 0);
}

/* Tell the local lockd (as registered with us) that `name` rebooted. */
static void notify_lockd(struct mon *m, uint32_t state) {
  uint32_t port = lookup(m->prog, m->vers, 17);
  if (!port) { fprintf(stderr, "kstatd: lockd %u/%u not registered\n", m->prog, m->vers); return; }
  int s = reserved_udp(htonl(INADDR_LOOPBACK));
  struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  struct wr w = { .n = 0 };
  call_head(&w, 0x6b730000 ^ (uint32_t)time(NULL), m->prog, m->vers, m->proc);
  putopaque(&w, m->name, strlen(m->name)); put32(&w, state);
  memcpy(w.b + w.n, m->priv, 16); w.n += 16;
  unsigned char out[512];
  int n = udp_call(s, &to, &w, out, sizeof out);
  fprintf(stderr, "kstatd: told lockd that %s restarted (state %u): %s\n", m->name, state, n > 0 ? "ok" : "no answer");
  close(s);
}

/* Handles one call; returns the reply length in w (0: none). */
static void handle(const unsigned char *msg, size_t len, struct sockaddr_in *from, struct wr *w) {
  struct rd r = { msg, len, 0, 0 };
  uint32_t xid = get32(&r), mtype = get32(&r), rpcv = get32(&r), prog = get32(&r), vers = get32(&r), proc = get32(&r);
  get32(&r); getopaque(&r, NULL, 400); get32(&r); getopaque(&r, NULL, 400);
  w->n = 0;
  if (r.bad || mtype != 0 || rpcv != 2) return;
  if (prog == PMAP_PROG) {
    if (vers != 2) { reply_head(w, xid, 2); put32(w, 2); put32(w, 2); return; }
    struct map m = { 0 };
    if (proc >= 1 && proc <= 3) { m.prog = get32(&r); m.vers = get32(&r); m.prot = get32(&r); m.port = get32(&r); }
    if (r.bad) { reply_head(w, xid, 4); return; }
    switch (proc) {
    case 0: reply_head(w, xid, 0); return;
    case 1: {
      int ok = is_local_priv(from) && !lookup(m.prog, m.vers, m.prot) && nmaps < MAXMAP;
      if (ok) maps[nmaps++] = m;
      reply_head(w, xid, 0); put32(w, ok); return;
    }
    case 2: {
      int ok = 0;
      if (is_local_priv(from))
        for (int i = 0; i < nmaps; i++)
          if (maps[i].prog == m.prog && maps[i].vers == m.vers) { maps[i--] = maps[--nmaps]; ok = 1; }
      reply_head(w, xid, 0); put32(w, ok); return;
    }
    case 3: reply_head(w, xid, 0); put32(w, lookup(m.prog, m.vers, m.prot)); return;
    case 4:
      reply_head(w, xid, 0);
      for (int i = 0; i < nmaps; i++) { put32(w, 1); put32(w, maps[i].prog); put32(w, maps[i].vers); put32(w, maps[i].prot); put32(w, maps[i].port); }
      put32(w, 0); return;
    default: reply_head(w, xid, 3); return;
    }
  }
  if (prog == SM_PROG) {
    if (vers != 1) { reply_head(w, xid, 2); put32(w, 1); put32(w, 1); return; }
    char name[1025] = { 0 };
    switch (proc) {
    case 0: reply_head(w, xid, 0); return;
    case 1: /* STAT */
      getopaque(&r, (unsigned char *)name, 1024);
      if (r.bad) { reply_head(w, xid, 4); return; }
      reply_head(w, xid, 0); put32(w, 0); put32(w, my_state); return;
    case 2: { /* MON */
      struct mon m = { .used = 1 };
      size_t n = getopaque(&r, (unsigned char *)name, 1024);
      getopaque(&r, NULL, 1024);
      m.prog = get32(&r); m.vers = get32(&r); m.proc = get32(&r);
      getfixed(&r, m.priv, 16);
      if (r.bad || n >= sizeof m.name) { reply_head(w, xid, 4); return; }
      memcpy(m.name, name, n);
      int slot = -1;
      for (int i = 0; i < MAXMON; i++)
        if (mons[i].used && !strcmp(mons[i].name, m.name) && !memcmp(mons[i].priv, m.priv, 16)) slot = i;
      for (int i = 0; i < MAXMON && slot < 0; i++) if (!mons[i].used) slot = i;
      int ok = slot >= 0 && is_local_priv(from);
      if (ok) mons[slot] = m;
      fprintf(stderr, "kstatd: SM_MON %s: %s\n", m.name, ok ? "monitored" : "refused");
      reply_head(w, xid, 0); put32(w, ok ? 0 : 1); put32(w, my_state); return;
    }
    case 3: /* UNMON */
      getopaque(&r, (unsigned char *)name, 1024);
      for (int i = 0; i < MAXMON; i++) if (mons[i].used && !strcmp(mons[i].name, name) && is_local_priv(from)) mons[i].used = 0;
      reply_head(w, xid, 0); put32(w, my_state); return;
    case 4: /* UNMON_ALL */
      if (is_local_priv(from)) memset(mons, 0, sizeof mons);
      reply_head(w, xid, 0); put32(w, my_state); return;
    case 5: reply_head(w, xid, 0); return;
    case 6: { /* NOTIFY: a server we monitor restarted */
      getopaque(&r, (unsigned char *)name, 1024);
      uint32_t state = get32(&r);
      if (r.bad) { reply_head(w, xid, 4); return; }
      char addr[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &from->sin_addr, addr, sizeof addr);
      fprintf(stderr, "kstatd: SM_NOTIFY from %s: %s state %u\n", addr, name, state);
      reply_head(w, xid, 0);
      for (int i = 0; i < MAXMON; i++)
        if (mons[i].used && (!strcmp(mons[i].name, name) || !strcmp(mons[i].name, addr))) notify_lockd(&mons[i], state);
      return;
    }
    default: reply_head(w, xid, 3); return;
    }
  }
  reply_head(w, xid, 1);
}

static int listen_on(int type, uint16_t port) {
  int s = socket(AF_INET, type, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY) };
  if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("kstatd: bind"); exit(1); }
  if (type == SOCK_STREAM) listen(s, 16);
  return s;
}

static uint16_t port_of(int s) {
  struct sockaddr_in a; socklen_t l = sizeof a;
  getsockname(s, (struct sockaddr *)&a, &l);
  return ntohs(a.sin_port);
}

static int read_full(int fd, unsigned char *b, size_t n) {
  size_t got = 0;
  while (got < n) { ssize_t k = read(fd, b + got, n - got); if (k <= 0) return -1; got += k; }
  return 0;
}

static int notify_main(const char *host, const char *name, uint32_t state) {
  struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(111) };
  if (inet_pton(AF_INET, host, &to.sin_addr) != 1) return 2;
  int s = reserved_udp(htonl(INADDR_ANY));
  struct wr w = { .n = 0 };
  call_head(&w, 0x6b740000 ^ (uint32_t)getpid(), PMAP_PROG, 2, 3);
  put32(&w, SM_PROG); put32(&w, 1); put32(&w, 17); put32(&w, 0);
  unsigned char out[512];
  int n = udp_call(s, &to, &w, out, sizeof out);
  if (n < 28) { fprintf(stderr, "kstatd: no portmapper at %s\n", host); return 1; }
  uint32_t port; memcpy(&port, out + 24, 4); port = ntohl(port);
  if (!port) { fprintf(stderr, "kstatd: no statd at %s\n", host); return 1; }
  to.sin_port = htons(port);
  w.n = 0;
  call_head(&w, 0x6b750000 ^ (uint32_t)getpid(), SM_PROG, 1, 6);
  putopaque(&w, name, strlen(name)); put32(&w, state);
  n = udp_call(s, &to, &w, out, sizeof out);
  if (n < 24) { fprintf(stderr, "kstatd: SM_NOTIFY to %s not answered\n", host); return 1; }
  printf("kstatd: SM_NOTIFY %s state %u sent to %s:%u\n", name, state, host, port);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "notify")) return notify_main(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 10));
  int pu = listen_on(SOCK_DGRAM, 111), pt = listen_on(SOCK_STREAM, 111);
  int su = listen_on(SOCK_DGRAM, 0), st = listen_on(SOCK_STREAM, 0);
  maps[nmaps++] = (struct map){ PMAP_PROG, 2, 17, 111 };
  maps[nmaps++] = (struct map){ PMAP_PROG, 2, 6, 111 };
  maps[nmaps++] = (struct map){ SM_PROG, 1, 17, port_of(su) };
  maps[nmaps++] = (struct map){ SM_PROG, 1, 6, port_of(st) };
  if (fork() > 0) return 0; /* listening: the caller may go on */
  setsid();
  struct pollfd fds[4 + MAXCONN];
  int nconn = 0;
  int base[4] = { pu, pt, su, st };
  unsigned char buf[BUF];
  for (;;) {
    for (int i = 0; i < 4; i++) fds[i] = (struct pollfd){ .fd = base[i], .events = POLLIN };
    int n = 4 + nconn;
    if (poll(fds, n, -1) < 0) continue;
    for (int i = 0; i < n; i++) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int fd = fds[i].fd;
      struct sockaddr_in from; socklen_t fl = sizeof from;
      struct wr w;
      if (fd == pu || fd == su) {
        ssize_t k = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (k <= 0) continue;
        handle(buf, k, &from, &w);
        if (w.n) sendto(fd, w.b, w.n, 0, (struct sockaddr *)&from, fl);
      } else if (fd == pt || fd == st) {
        int c = accept(fd, NULL, NULL);
        if (c >= 0 && nconn < MAXCONN) fds[4 + nconn++] = (struct pollfd){ .fd = c, .events = POLLIN };
        else if (c >= 0) close(c);
      } else {
        unsigned char mark[4];
        getpeername(fd, (struct sockaddr *)&from, &fl);
        uint32_t rm;
        if (read_full(fd, mark, 4) < 0 || ((memcpy(&rm, mark, 4), rm = ntohl(rm)) & 0x7fffffff) > sizeof buf
            || read_full(fd, buf, rm & 0x7fffffff) < 0) {
          close(fd);
          fds[i] = fds[4 + --nconn];
          i--; n--;
          continue;
        }
        handle(buf, rm & 0x7fffffff, &from, &w);
        if (w.n) {
          uint32_t m = htonl(0x80000000u | (uint32_t)w.n);
          unsigned char out[BUF + 4];
          memcpy(out, &m, 4); memcpy(out + 4, w.b, w.n);
          if (write(fd, out, w.n + 4) < 0) { /* the peer went away */ }
        }
      }
    }
  }
}
