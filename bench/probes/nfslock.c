/*
 * nfslock: ROMIO ad_nfs's write pattern from PROCS client processes at
 * once: lock a 4 KiB range (NLM4 LOCK, blocking, exclusive), write it
 * (NFSv3 WRITE, unstable), unlock it (NLM4 UNLOCK); with MODE "nolock",
 * the same writes without the locks. Offsets are random 4 KiB blocks of
 * one shared file, each process on blocks of its own (as MPI ranks write
 * disjoint pieces), so the locks are taken in the same file but never
 * conflict. Prints the rate over all processes (writes per second).
 *
 *   nfslock nfs://SERVER/EXPORT?ARGS PROCS SECONDS lock|nolock [NLM_PORT [FILE_MIB]]
 *
 * Every process mounts on its own and opens its own NLM connection (TCP;
 * to NLM_PORT, or the port the server's portmapper gives for NLM v4 if it
 * is 0 or absent), as separate client nodes would. The file is
 * /nfslock.dat in the export, FILE_MIB (default 64) long, made by the
 * first process. A BLOCKED answer (none is expected) is polled by sending
 * the LOCK again every millisecond, and counted. Built by
 * bench/probes/build.sh.
 */
#include <sys/time.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nlm.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* libnfs's handle (libnfs-private.h; the same in 4.x and 5.x). */
struct nfs_fh {
	int len;
	char *val;
};

static const char *file_path = "/nfslock.dat";

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(struct nfs_context *nfs, const char *what)
{
	fprintf(stderr, "nfslock: %s: %s\n", what, nfs ? nfs_get_error(nfs) : "");
	exit(1);
}

/* One call in flight on an rpc_context, waited for by polling its fd. */
struct wait {
	int done, status, nlm;
};

static void rpc_done(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct wait *w = priv;
	(void)rpc;
	w->done = 1;
	w->status = status;
	/* NLM4_LOCKres and NLM4_UNLOCKres are both { cookie, status }. */
	if (status == RPC_STATUS_SUCCESS && data)
		w->nlm = ((NLM4_LOCKres *)data)->status;
}

static void wait_rpc(struct rpc_context *rpc, struct wait *w, const char *what)
{
	while (!w->done) {
		struct pollfd p = { .fd = rpc_get_fd(rpc), .events = rpc_which_events(rpc) };
		if (poll(&p, 1, 1000) < 0 || rpc_service(rpc, p.revents) < 0) {
			fprintf(stderr, "nfslock: %s: %s\n", what, rpc_get_error(rpc));
			exit(1);
		}
	}
	if (w->status != RPC_STATUS_SUCCESS) {
		fprintf(stderr, "nfslock: %s: rpc status %d: %s\n", what, w->status, rpc_get_error(rpc));
		exit(1);
	}
}

/* Runs one client: waits on `go`, works for `seconds`, writes its count
 * and its start and end times to `out`. */
static void client(const char *url, int id, int procs, double seconds, int locked, int nlm_port,
		   uint64_t blocks, int go, int out)
{
	struct nfs_context *nfs = nfs_init_context();
	struct rpc_context *rpc = NULL;
	struct nfs_url *u;
	struct nfsfh *fh;
	char name[64], oh[96], buf[4096];
	double res[4] = { 0, 0, 0, 0 }; /* writes, start, end, blocked */
	struct wait w;
	char c;

	if (!nfs)
		die(NULL, "init");
	u = nfs_parse_url_dir(nfs, url);
	if (!u)
		die(nfs, "url");
	if (nfs_mount(nfs, u->server, u->path) != 0)
		die(nfs, "mount");
	if (nfs_open(nfs, file_path, O_RDWR, &fh) != 0)
		die(nfs, "open");
	if (locked) {
		rpc = rpc_init_context();
		if (!rpc)
			die(NULL, "rpc init");
		memset(&w, 0, sizeof w);
		if ((nlm_port > 0 ? rpc_connect_async(rpc, u->server, nlm_port, rpc_done, &w)
				  : rpc_connect_program_async(rpc, u->server, NLM_PROGRAM, NLM_V4, rpc_done, &w)) != 0) {
			fprintf(stderr, "nfslock: nlm connect: %s\n", rpc_get_error(rpc));
			exit(1);
		}
		wait_rpc(rpc, &w, "nlm connect");
	}
	snprintf(name, sizeof name, "nfslock-%d-%d", (int)getppid(), id);
	snprintf(oh, sizeof oh, "%d@%s", (int)getpid(), name);
	memset(buf, 'a' + id % 26, sizeof buf);
	srandom(getpid());

	struct nfs_fh *nfh = nfs_get_fh(fh);
	nlm4_lock lk = {
		.caller_name = name,
		.fh = { .data = { .data_len = nfh->len, .data_val = nfh->val } },
		.oh = oh,
		.svid = getpid(),
		.l_len = sizeof buf,
	};
	uint32_t cookie = 0;

	if (read(go, &c, 1) != 1)
		exit(1);
	res[1] = now();
	for (;;) {
		double t = now();
		if (t - res[1] >= seconds) {
			res[2] = t;
			break;
		}
		/* A block of this process's own: id, id + procs, ... */
		uint64_t block = (uint64_t)random() % (blocks / procs) * procs + id;
		uint64_t off = block * sizeof buf;
		lk.l_offset = off;
		if (locked) {
			NLM4_LOCKargs a = { .block = 1, .exclusive = 1, .lock = lk, .state = 1 };
			cookie++;
			a.cookie.data.data_len = sizeof cookie;
			a.cookie.data.data_val = (char *)&cookie;
			for (;;) {
				memset(&w, 0, sizeof w);
				if (rpc_nlm4_lock_async(rpc, rpc_done, &a, &w) != 0)
					die(NULL, "queue lock");
				wait_rpc(rpc, &w, "lock");
				if (w.nlm == NLM4_GRANTED)
					break;
				if (w.nlm != NLM4_BLOCKED) {
					fprintf(stderr, "nfslock: lock: %s\n", nlmstat4_to_str(w.nlm));
					exit(1);
				}
				res[3]++;
				usleep(1000);
			}
		}
		if (nfs_pwrite(nfs, fh, off, sizeof buf, buf) != (int)sizeof buf)
			die(nfs, "write");
		if (locked) {
			NLM4_UNLOCKargs a = { .lock = lk };
			a.cookie.data.data_len = sizeof cookie;
			a.cookie.data.data_val = (char *)&cookie;
			memset(&w, 0, sizeof w);
			if (rpc_nlm4_unlock_async(rpc, rpc_done, &a, &w) != 0)
				die(NULL, "queue unlock");
			wait_rpc(rpc, &w, "unlock");
			if (w.nlm != NLM4_GRANTED) {
				fprintf(stderr, "nfslock: unlock: %s\n", nlmstat4_to_str(w.nlm));
				exit(1);
			}
		}
		res[0]++;
	}
	if (write(out, res, sizeof res) != sizeof res)
		exit(1);
	nfs_close(nfs, fh);
	if (rpc)
		rpc_destroy_context(rpc);
	nfs_destroy_url(u);
	nfs_destroy_context(nfs);
	exit(0);
}

/* Makes the shared file, FILE_MIB long. */
static void make_file(const char *url, uint64_t bytes)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *u;
	struct nfsfh *fh;
	if (!nfs)
		die(NULL, "init");
	u = nfs_parse_url_dir(nfs, url);
	if (!u)
		die(nfs, "url");
	if (nfs_mount(nfs, u->server, u->path) != 0)
		die(nfs, "mount");
	if (nfs_open(nfs, file_path, O_RDWR, &fh) != 0 && nfs_creat(nfs, file_path, 0644, &fh) != 0)
		die(nfs, "create");
	if (nfs_ftruncate(nfs, fh, bytes) != 0)
		die(nfs, "truncate");
	nfs_close(nfs, fh);
	nfs_destroy_url(u);
	nfs_destroy_context(nfs);
}

int main(int argc, char **argv)
{
	int procs, go[2], out[2], locked, nlm_port = 0;
	double seconds;
	uint64_t mib = 64;
	if (argc < 5 || argc > 7 || (strcmp(argv[4], "lock") && strcmp(argv[4], "nolock"))) {
		fprintf(stderr, "usage: nfslock nfs://SERVER/EXPORT PROCS SECONDS lock|nolock [NLM_PORT [FILE_MIB]]\n");
		return 2;
	}
	procs = atoi(argv[2]);
	seconds = atof(argv[3]);
	locked = !strcmp(argv[4], "lock");
	if (argc > 5)
		nlm_port = atoi(argv[5]);
	if (argc > 6)
		mib = strtoull(argv[6], NULL, 10);
	if (procs < 1 || seconds <= 0 || mib * 256 < (uint64_t)procs || pipe(go) || pipe(out))
		return 2;
	make_file(argv[1], mib << 20);
	for (int i = 0; i < procs; i++)
		if (fork() == 0) {
			close(go[1]);
			client(argv[1], i, procs, seconds, locked, nlm_port, mib * 256, go[0], out[1]);
		}
	close(go[0]);
	close(out[1]);
	sleep(1); /* every client mounted and connected */
	for (int i = 0; i < procs; i++)
		if (write(go[1], "g", 1) != 1)
			return 1;
	double first = 1e300, last = 0, writes = 0, blocked = 0, r[4];
	for (int i = 0; i < procs; i++) {
		if (read(out[0], r, sizeof r) != sizeof r) {
			fprintf(stderr, "nfslock: a client failed\n");
			return 1;
		}
		writes += r[0];
		first = r[1] < first ? r[1] : first;
		last = r[2] > last ? r[2] : last;
		blocked += r[3];
	}
	printf("%s %d procs: %.0f writes/s (%.0f writes, %.0f blocked)\n", argv[4], procs,
	       writes / (last - first), writes, blocked);
	int failed = 0, status;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	return failed;
}
