/*
 * nfsping: NULL or GETATTR calls at a fixed number in flight, through
 * libnfs (an NFS client Keel did not write), for a fixed time; prints
 * calls per second and the mean latency.
 *
 *   nfsping nfs://SERVER/EXPORT FILE null|getattr DEPTH SECONDS
 *
 * URL arguments are libnfs's (?nfsport=2049&mountport=2049&version=3).
 * Built by bench/probes/build.sh against Debian's libnfs-dev.
 */
#include <sys/time.h>
#include <stdint.h>
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* libnfs keeps struct nfs_fh private; this is its layout in libnfs 4. */
struct nfs_fh {
	int len;
	char *val;
};

static struct GETATTR3args getattr_args;
static long done, failed, inflight;
static int use_null;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void issue(struct rpc_context *rpc);

static void answered(struct rpc_context *rpc, int status, void *data, void *priv)
{
	inflight--;
	if (status != RPC_STATUS_SUCCESS) {
		failed++;
	} else if (!use_null && ((GETATTR3res *)data)->status != NFS3_OK) {
		failed++;
	} else {
		done++;
	}
	(void)priv;
	issue(rpc);
}

static int stopping;

static void issue(struct rpc_context *rpc)
{
	if (stopping)
		return;
	int r = use_null ? rpc_nfs3_null_async(rpc, answered, NULL)
			 : rpc_nfs3_getattr_async(rpc, answered, &getattr_args, NULL);
	if (r != 0) {
		fprintf(stderr, "nfsping: cannot send: %s\n", rpc_get_error(rpc));
		exit(2);
	}
	inflight++;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: nfsping nfs://SERVER/EXPORT FILE null|getattr DEPTH SECONDS\n");
		return 2;
	}
	use_null = strcmp(argv[3], "null") == 0;
	int depth = atoi(argv[4]);
	double seconds = atof(argv[5]);
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url = nfs_parse_url_dir(nfs, argv[1]);
	if (!url || nfs_mount(nfs, url->server, url->path) != 0) {
		fprintf(stderr, "nfsping: cannot mount %s: %s\n", argv[1], nfs_get_error(nfs));
		return 2;
	}
	struct nfsfh *fh;
	if (nfs_open(nfs, argv[2], O_RDONLY, &fh) != 0) {
		fprintf(stderr, "nfsping: cannot open %s: %s\n", argv[2], nfs_get_error(nfs));
		return 2;
	}
	struct nfs_fh *raw = nfs_get_fh(fh);
	getattr_args.object.data.data_len = raw->len;
	getattr_args.object.data.data_val = raw->val;
	struct rpc_context *rpc = nfs_get_rpc_context(nfs);

	double start = now(), end = start + seconds;
	for (int i = 0; i < depth; i++)
		issue(rpc);
	while (now() < end || inflight > 0) {
		if (now() >= end)
			stopping = 1;
		struct pollfd p = { .fd = rpc_get_fd(rpc), .events = rpc_which_events(rpc) };
		if (poll(&p, 1, 1000) < 0)
			break;
		if (rpc_service(rpc, p.revents) < 0) {
			fprintf(stderr, "nfsping: %s\n", rpc_get_error(rpc));
			return 2;
		}
	}
	double elapsed = now() - start;
	printf("%s depth %d: %.0f calls/s, %.1f us mean latency, %ld failed\n", argv[3], depth, done / elapsed,
	       elapsed / (done ? done : 1) * depth * 1e6, failed);
	nfs_close(nfs, fh);
	nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return failed ? 1 : 0;
}
