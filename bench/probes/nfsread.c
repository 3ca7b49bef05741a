/*
 * nfsread: IOR's file-per-process sequential read over libnfs (IOR's
 * LIBNFS backend, aiori-LIBNFS.c): each of N processes mounts on its own
 * connection, opens its own file once, and reads it in records of a fixed
 * size with the synchronous API (nfs_lseek, then nfs_read: one call in
 * flight per process). Each process first reads its file once whole (the
 * warm-up: the server's page cache and handles), then all start together
 * and read for SECONDS, from the start again at the end of the file (IOR's
 * repetitions). Prints the rate of all processes together.
 *
 *   nfsread nfs://SERVER/EXPORT FILE N SECONDS [RECORD_BYTES]
 *
 * Process i reads FILE.i (FILE.0 ... FILE.N-1); RECORD_BYTES defaults to
 * 1 MiB. URL arguments are libnfs's (?nfsport=2049&mountport=2049&version=3).
 * Output: "read 1048576 B x N: 4321.0 MiB/s, 231.4 us per record, ..." and
 * one line per process. Built by bench/probes/build.sh against Debian's
 * libnfs-dev.
 */
#include <sys/time.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nfsc/libnfs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Processes at most (a bound on forks and pipes). */
#define PROCS_MAX 64

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* What a process sends back. */
struct result {
	uint64_t bytes;
	uint64_t records;
	double seconds;
	int failed;
};

/* One record at the file offset, as IOR's LIBNFS_Xfer: seek, then read. */
static int64_t xfer(struct nfs_context *nfs, struct nfsfh *fh, uint64_t offset, char *buf, uint64_t record)
{
	uint64_t at;
	if (nfs_lseek(nfs, fh, offset, SEEK_SET, &at) != 0 || at != offset)
		return -1;
	return nfs_read(nfs, fh, record, buf);
}

static void child(const char *urltext, const char *file, int i, double seconds, uint64_t record, int ready,
		  int go, int report)
{
	struct result r = { 0 };
	char path[4096];
	snprintf(path, sizeof path, "%s.%d", file, i);
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url = nfs ? nfs_parse_url_dir(nfs, urltext) : NULL;
	if (!url || nfs_mount(nfs, url->server, url->path) != 0) {
		fprintf(stderr, "nfsread: cannot mount %s: %s\n", urltext, nfs ? nfs_get_error(nfs) : "no memory");
		r.failed = 1;
	}
	struct nfsfh *fh = NULL;
	if (!r.failed && nfs_open(nfs, path, O_RDONLY, &fh) != 0) {
		fprintf(stderr, "nfsread: cannot open %s: %s\n", path, nfs_get_error(nfs));
		r.failed = 1;
	}
	char *buf = malloc(record);
	if (!buf)
		r.failed = 1;
	/* The warm-up: the whole file once. */
	uint64_t size = 0;
	while (!r.failed) {
		int64_t n = xfer(nfs, fh, size, buf, record);
		if (n < 0) {
			fprintf(stderr, "nfsread: %s: %s\n", path, nfs_get_error(nfs));
			r.failed = 1;
		}
		if (n <= 0)
			break;
		size += n;
	}
	if (!r.failed && size < record) {
		fprintf(stderr, "nfsread: %s holds %" PRIu64 " bytes, less than a record\n", path, size);
		r.failed = 1;
	}
	char c = 0;
	if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1)
		r.failed = 1;
	double start = now(), end = start + seconds;
	uint64_t offset = 0;
	while (!r.failed && now() < end) {
		int64_t n = xfer(nfs, fh, offset, buf, record);
		if (n < 0) {
			fprintf(stderr, "nfsread: %s: %s\n", path, nfs_get_error(nfs));
			r.failed = 1;
			break;
		}
		r.bytes += n;
		r.records++;
		offset += n;
		if (n == 0 || offset >= size)
			offset = 0;
	}
	r.seconds = now() - start;
	if (write(report, &r, sizeof r) != sizeof r)
		exit(2);
	exit(r.failed ? 1 : 0);
}

int main(int argc, char **argv)
{
	if (argc < 5 || argc > 6) {
		fprintf(stderr, "usage: nfsread nfs://SERVER/EXPORT FILE N SECONDS [RECORD_BYTES]\n");
		return 2;
	}
	int procs = atoi(argv[3]);
	double seconds = atof(argv[4]);
	uint64_t record = argc == 6 ? strtoull(argv[5], NULL, 10) : 1 << 20;
	if (procs < 1 || procs > PROCS_MAX || seconds <= 0 || record == 0) {
		fprintf(stderr, "nfsread: N is 1 to %d, SECONDS and RECORD_BYTES above 0\n", PROCS_MAX);
		return 2;
	}
	int ready[2], go[2], report[2];
	if (pipe(ready) || pipe(go) || pipe(report)) {
		perror("nfsread: pipe");
		return 2;
	}
	pid_t pids[PROCS_MAX];
	for (int i = 0; i < procs; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("nfsread: fork");
			return 2;
		}
		if (pids[i] == 0)
			child(argv[1], argv[2], i, seconds, record, ready[1], go[0], report[1]);
	}
	/* Every process mounted, opened and read its file once: all start. */
	char c = 0;
	for (int i = 0; i < procs; i++)
		if (read(ready[0], &c, 1) != 1) {
			fprintf(stderr, "nfsread: a process ended before it was ready\n");
			return 2;
		}
	for (int i = 0; i < procs; i++)
		if (write(go[1], &c, 1) != 1)
			return 2;
	struct result all = { 0 };
	double longest = 0;
	for (int i = 0; i < procs; i++) {
		struct result r;
		if (read(report[0], &r, sizeof r) != sizeof r) {
			fprintf(stderr, "nfsread: a process ended without a result\n");
			return 2;
		}
		printf("  process: %.1f MiB/s, %" PRIu64 " records%s\n", r.bytes / r.seconds / (1 << 20), r.records,
		       r.failed ? ", failed" : "");
		all.bytes += r.bytes;
		all.records += r.records;
		all.failed |= r.failed;
		if (r.seconds > longest)
			longest = r.seconds;
	}
	for (int i = 0; i < procs; i++)
		waitpid(pids[i], NULL, 0);
	printf("read %" PRIu64 " B x %d: %.1f MiB/s, %.1f us per record%s\n", record, procs,
	       all.bytes / longest / (1 << 20), all.records ? longest * procs / all.records * 1e6 : 0.0,
	       all.failed ? ", failed" : "");
	return all.failed ? 1 : 0;
}
