/*
 * pingpong: the loopback's own round trip, the bound for one call in
 * flight. A server thread answers each REQ-byte message with a RESP-byte
 * one on a TCP connection; the client sends the next message only when the
 * answer is in. Sizes default to a GETATTR call and reply.
 *
 *   pingpong SECONDS [REQ_BYTES RESP_BYTES]
 *   pingpong SECONDS --null PORT
 *   pingpong SECONDS --getattr PORT MOUNT_PORT EXPORT
 *
 * With --null the same client loop sends NFSv3 NULL calls (44 bytes with
 * the record mark, AUTH_NONE) to 127.0.0.1:PORT and reads the 28-byte
 * replies: the server's cost at one call in flight with no client-library
 * cost on top, to set beside a ping-pong of 44/28 bytes. As root it binds a
 * reserved port, as secure exports require.
 *
 * With --getattr it asks MOUNT_PORT (MOUNT v3, MNT) for EXPORT's root
 * handle, then sends NFSv3 GETATTR calls for it (AUTH_SYS, uid 0) to PORT
 * one at a time: GETATTR's cost at one call in flight without a client
 * library's, beside the default 132/120-byte ping-pong.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int req = 132, resp = 120;

static int full(int fd, char *buf, int n, int writing)
{
	for (int done = 0; done < n;) {
		ssize_t r = writing ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
		if (r <= 0)
			return -1;
		done += r;
	}
	return 0;
}

static void *serve(void *arg)
{
	int fd = accept(*(int *)arg, NULL, NULL);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char buf[65536];
	while (full(fd, buf, req, 0) == 0 && full(fd, buf, resp, 1) == 0)
		;
	close(fd);
	return NULL;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int connect_reserved(int port);

static int null_calls(double seconds, int port)
{
	int c = connect_reserved(port);
	if (c < 0)
		return perror("connect"), 2;
	/* mark, xid, CALL, rpcvers 2, NFS 100003, v3, NULL, AUTH_NONE x2 */
	uint32_t call[11] = { htonl(0x80000000 | 40), 0, 0, htonl(2), htonl(100003), htonl(3), 0, 0, 0, 0, 0 };
	uint32_t reply[7];
	long n = 0;
	double start = now(), end = start + seconds;
	while (now() < end) {
		call[1] = htonl(n);
		if (full(c, (char *)call, sizeof call, 1) || full(c, (char *)reply, sizeof reply, 0))
			return perror("null"), 2;
		/* xid, REPLY, MSG_ACCEPTED, AUTH_NONE, SUCCESS */
		if (reply[1] != htonl(n) || reply[2] != htonl(1) || reply[3] != 0 || reply[6] != 0)
			return fprintf(stderr, "null: unexpected reply\n"), 2;
		n++;
	}
	double elapsed = now() - start;
	printf("rpc NULL: %.0f calls/s, %.1f us each\n", n / elapsed, elapsed / n * 1e6);
	return 0;
}

/* One RPC call as a record; returns the reply's body (after the record
 * mark) in `reply`, its length, or -1. Only single-fragment replies. */
static int rpc_call(int c, uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc, const char *args, int args_len,
		    uint32_t *reply, int reply_max)
{
	uint32_t call[16 + 1100 / 4]; /* the header, and MNT's longest path */
	int n = 1;
	call[n++] = htonl(xid);
	call[n++] = 0; /* CALL */
	call[n++] = htonl(2);
	call[n++] = htonl(prog);
	call[n++] = htonl(vers);
	call[n++] = htonl(proc);
	/* AUTH_SYS: stamp, machine name "pp", uid 0, gid 0, no groups */
	call[n++] = htonl(1);
	call[n++] = htonl(24);
	call[n++] = 0;
	call[n++] = htonl(2);
	memcpy(&call[n++], "pp\0\0", 4);
	call[n++] = 0;
	call[n++] = 0;
	call[n++] = 0;
	call[n++] = 0; /* verifier: AUTH_NONE */
	call[n++] = 0;
	if ((size_t)n * 4 + args_len > sizeof call)
		return -1;
	memcpy(&call[n], args, args_len);
	int len = n * 4 + args_len;
	call[0] = htonl(0x80000000 | (len - 4));
	uint32_t mark;
	if (full(c, (char *)call, len, 1) || full(c, (char *)&mark, 4, 0))
		return -1;
	int body = ntohl(mark) & 0x7fffffff;
	if (!(ntohl(mark) & 0x80000000) || body > reply_max * 4 || full(c, (char *)reply, body, 0))
		return -1;
	/* xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE (0, 0), SUCCESS */
	if (body < 24 || reply[0] != htonl(xid) || reply[1] != htonl(1) || reply[2] != 0 || reply[4] != 0 || reply[5] != 0)
		return -1;
	return body;
}

static int connect_reserved(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int c = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	for (int p = 1023; geteuid() == 0 && p >= 600; p--) {
		struct sockaddr_in b = { .sin_family = AF_INET, .sin_port = htons(p) };
		if (bind(c, (struct sockaddr *)&b, sizeof b) == 0)
			break;
	}
	a.sin_port = htons(port);
	if (connect(c, (struct sockaddr *)&a, sizeof a))
		return -1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return c;
}

static int getattr_calls(double seconds, int port, int mount_port, const char *export)
{
	uint32_t reply[256];
	char args[1100];
	int m = connect_reserved(mount_port);
	if (m < 0)
		return perror("connect (mount)"), 2;
	uint32_t path_len = strlen(export);
	if (path_len > 1024)
		return fprintf(stderr, "getattr: export path too long\n"), 2;
	uint32_t be = htonl(path_len);
	memcpy(args, &be, 4);
	memset(args + 4, 0, (path_len + 3) & ~3u);
	memcpy(args + 4, export, path_len);
	/* MOUNT v3 MNT: mountstat3, then the handle (length, bytes) */
	int got = rpc_call(m, 1, 100005, 3, 1, args, 4 + ((path_len + 3) & ~3u), reply, 256);
	if (got < 32 || reply[6] != 0)
		return fprintf(stderr, "getattr: MNT %s failed (reply of %d bytes, status %u)\n", export, got, got >= 28 ? ntohl(reply[6]) : 0), 2;
	uint32_t fh_len = ntohl(reply[7]);
	if (fh_len > 64 || got < 32 + (int)fh_len)
		return fprintf(stderr, "getattr: bad handle from MNT\n"), 2;
	close(m);
	int fh_args = 4 + ((fh_len + 3) & ~3u);
	memset(args, 0, fh_args);
	memcpy(args, &reply[7], 4 + fh_len);
	int c = connect_reserved(port);
	if (c < 0)
		return perror("connect"), 2;
	long n = 0;
	double start = now(), end = start + seconds;
	while (now() < end) {
		got = rpc_call(c, n + 2, 100003, 3, 1, args, fh_args, reply, 256);
		/* nfsstat3 NFS3_OK, then a fattr3 (84 bytes) */
		if (got != 28 + 84 || reply[6] != 0)
			return fprintf(stderr, "getattr: unexpected reply\n"), 2;
		n++;
	}
	double elapsed = now() - start;
	printf("rpc GETATTR: %.0f calls/s, %.1f us each\n", n / elapsed, elapsed / n * 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	if (argc > 3) {
		req = atoi(argv[2]);
		resp = atoi(argv[3]);
	}
	if (argc > 3 && strcmp(argv[2], "--null") == 0)
		return null_calls(seconds, atoi(argv[3]));
	if (argc > 5 && strcmp(argv[2], "--getattr") == 0)
		return getattr_calls(seconds, atoi(argv[3]), atoi(argv[4]), argv[5]);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &len))
		return perror("listen"), 2;
	pthread_t t;
	pthread_create(&t, NULL, serve, &l);
	int c = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (connect(c, (struct sockaddr *)&a, sizeof a))
		return perror("connect"), 2;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char buf[65536] = { 0 };
	long n = 0;
	double start = now(), end = start + seconds;
	while (now() < end) {
		if (full(c, buf, req, 1) || full(c, buf, resp, 0))
			return perror("ping"), 2;
		n++;
	}
	double elapsed = now() - start;
	printf("tcp ping-pong %d/%d bytes: %.0f round trips/s, %.1f us each\n", req, resp, n / elapsed, elapsed / n * 1e6);
	return 0;
}
