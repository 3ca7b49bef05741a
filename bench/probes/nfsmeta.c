/*
 * nfsmeta: mdtest's three phases (create, stat, remove of empty files)
 * through libnfs's synchronous API, one call in flight per process, from
 * PROCS processes at once, each in a directory of its own; prints each
 * phase's rate over all processes (files per second).
 *
 *   nfsmeta nfs://SERVER/EXPORT?ARGS PROCS FILES_PER_PROC
 *   nfsmeta /LOCAL/DIR PROCS FILES_PER_PROC [durable]
 *
 * Every process mounts on its own (its own TCP connection), as separate
 * client nodes would. With a local directory instead of a URL, the same
 * phases run on the local file system with no server: what it does on
 * its own. `durable` then syncs what a sync NFS export must make stable
 * before it replies (the new file and its directory after a create, the
 * directory after a remove): the ceiling for any durable server on that
 * file system. Built by bench/probes/build.sh.
 */
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <signal.h>
#include <nfsc/libnfs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { CREATE, STAT, REMOVE, PHASES };
static const char *phase_name[PHASES] = { "create", "stat", "remove" };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(struct nfs_context *nfs, const char *what)
{
	fprintf(stderr, "nfsmeta: %s: %s\n", what, nfs ? nfs_get_error(nfs) : "");
	exit(1);
}

static void local_die(const char *what, const char *path)
{
	fprintf(stderr, "nfsmeta: %s %s: %m\n", what, path);
	exit(1);
}

/* One phase on the local file system; `dirfd` is the process's directory. */
static void local_phase(int p, int dirfd, const char *dir, long files, int durable)
{
	char name[64];
	struct stat st;
	for (long i = 0; i < files; i++) {
		snprintf(name, sizeof name, "f.%ld", i);
		if (p == CREATE) {
			int fd = openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY, 0644);
			if (fd < 0 || (durable && fsync(fd) != 0))
				local_die("create", name);
			close(fd);
		} else if (p == STAT) {
			if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
				local_die("stat", name);
		} else if (unlinkat(dirfd, name, 0) != 0) {
			local_die("remove", name);
		}
		if (durable && p != STAT && fsync(dirfd) != 0)
			local_die("sync", dir);
	}
}

/* Waits on a pipe until the parent starts the phase; its start time. */
static double await_phase(int go)
{
	char c;
	if (read(go, &c, 1) != 1)
		exit(1);
	return now();
}

static void report_times(int out, double t0)
{
	double t[2] = { t0, now() };
	if (write(out, t, sizeof t) != sizeof t)
		exit(1);
}

static void local_client(const char *root, int id, long files, int durable, int go, int out)
{
	char dir[4096];
	int dirfd;
	snprintf(dir, sizeof dir, "%s/nfsmeta.%d.%d", root, (int)getppid(), id);
	if (mkdir(dir, 0755) != 0 || (dirfd = open(dir, O_RDONLY | O_DIRECTORY)) < 0)
		local_die("mkdir", dir);
	for (int p = 0; p < PHASES; p++) {
		double t0 = await_phase(go);
		local_phase(p, dirfd, dir, files, durable);
		report_times(out, t0);
	}
	close(dirfd);
	rmdir(dir);
	exit(0);
}

/* Runs each phase when the parent starts it, and writes the phase's start
 * and end times to `out`. */
static void client(const char *url, int id, long files, int go, int out)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *u;
	char dir[64], path[128];
	if (!nfs)
		die(NULL, "init");
	u = nfs_parse_url_dir(nfs, url);
	if (!u)
		die(nfs, "url");
	if (nfs_mount(nfs, u->server, u->path) != 0)
		die(nfs, "mount");
	snprintf(dir, sizeof dir, "/nfsmeta.%d.%d", (int)getppid(), id);
	if (nfs_mkdir(nfs, dir) != 0)
		die(nfs, "mkdir");
	for (int p = 0; p < PHASES; p++) {
		double t0 = await_phase(go);
		for (long i = 0; i < files; i++) {
			struct nfsfh *fh;
			struct nfs_stat_64 st;
			snprintf(path, sizeof path, "%s/f.%ld", dir, i);
			if (p == CREATE) {
				if (nfs_creat(nfs, path, 0644, &fh) != 0)
					die(nfs, "create");
				nfs_close(nfs, fh);
			} else if (p == STAT) {
				if (nfs_stat64(nfs, path, &st) != 0)
					die(nfs, "stat");
			} else if (nfs_unlink(nfs, path) != 0) {
				die(nfs, "remove");
			}
		}
		report_times(out, t0);
	}
	nfs_rmdir(nfs, dir);
	nfs_destroy_url(u);
	nfs_destroy_context(nfs);
	exit(0);
}

int main(int argc, char **argv)
{
	int procs, go[2], out[2];
	long files;
	int local = argc > 1 && argv[1][0] == '/';
	int durable = local && argc == 5 && strcmp(argv[4], "durable") == 0;
	if (argc != 4 && !durable) {
		fprintf(stderr, "usage: nfsmeta nfs://SERVER/EXPORT PROCS FILES_PER_PROC\n"
				"       nfsmeta /LOCAL/DIR PROCS FILES_PER_PROC [durable]\n");
		return 2;
	}
	/* A client that died closes its end: report it, do not die of SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	procs = atoi(argv[2]);
	files = atol(argv[3]);
	if (procs < 1 || files < 1 || pipe(go) || pipe(out))
		return 2;
	for (int i = 0; i < procs; i++)
		if (fork() == 0) {
			close(go[1]);
			if (local)
				local_client(argv[1], i, files, durable, go[0], out[1]);
			client(argv[1], i, files, go[0], out[1]);
		}
	close(go[0]);
	close(out[1]);
	sleep(1); /* every client mounted and made its directory */
	for (int p = 0; p < PHASES; p++) {
		double first = 1e300, last = 0, t[2];
		/* One byte per client starts the phase for all at once. */
		for (int i = 0; i < procs; i++)
			if (write(go[1], "g", 1) != 1) {
				fprintf(stderr, "nfsmeta: a client failed before %s\n", phase_name[p]);
				return 1;
			}
		for (int i = 0; i < procs; i++) {
			if (read(out[0], t, sizeof t) != sizeof t) {
				fprintf(stderr, "nfsmeta: a client failed in %s\n", phase_name[p]);
				return 1;
			}
			first = t[0] < first ? t[0] : first;
			last = t[1] > last ? t[1] : last;
		}
		printf("%s %.0f files/s\n", phase_name[p], procs * files / (last - first));
		fflush(stdout);
	}
	int failed = 0, status;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	return failed;
}
