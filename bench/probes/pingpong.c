/*
 * pingpong: the loopback's own round trip, the bound for one call in
 * flight. A server thread answers each REQ-byte message with a RESP-byte
 * one on a TCP connection; the client sends the next message only when the
 * answer is in. Sizes default to a GETATTR call and reply.
 *
 *   pingpong SECONDS [REQ_BYTES RESP_BYTES]
 *   pingpong SECONDS --null PORT
 *
 * With --null the same client loop sends NFSv3 NULL calls (44 bytes with
 * the record mark, AUTH_NONE) to 127.0.0.1:PORT and reads the 28-byte
 * replies: the server's cost at one call in flight with no client-library
 * cost on top, to set beside a ping-pong of 44/28 bytes. As root it binds a
 * reserved port, as secure exports require.
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

static int null_calls(double seconds, int port)
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
		return perror("connect"), 2;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	if (argc > 3) {
		req = atoi(argv[2]);
		resp = atoi(argv[3]);
	}
	if (argc > 3 && strcmp(argv[2], "--null") == 0)
		return null_calls(seconds, atoi(argv[3]));
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
