/*
 * nfsmeta: mdtest's three phases (create, stat, remove of empty files)
 * through libnfs's synchronous API, one call in flight per process, from
 * PROCS processes at once, each in a directory of its own; prints each
 * phase's rate over all processes (files per second).
 *
 *   nfsmeta nfs://SERVER/EXPORT?ARGS PROCS FILES_PER_PROC [shared]
 *   nfsmeta /LOCAL/DIR PROCS FILES_PER_PROC [durable] [shared]
 *
 * Every process mounts on its own (its own TCP connection), as separate
 * client nodes would. Each works in a directory of its own (mdtest -u),
 * or with `shared` all in one (mdtest's default). With a local directory
 * instead of a URL, the same phases run on the local file system with no
 * server: what it does on its own. `durable` then makes stable what a
 * sync NFS export must before it replies, the new file and its directory
 * entry after a create, the directory after a remove: the ceiling for
 * any durable server on that file system. A create is made durable by
 * fsync of the file and then of the directory; on XFS by the file's
 * fsync alone, since XFS logs the new inode and the directory entry in
 * one transaction and the fsync forces the log through it (what knfsd's
 * commit_metadata does there, and Keel: docs/benchmarks.md). The
 * directory's fsync would force the log once more whenever another
 * process changed the directory in between. Built by
 * bench/probes/build.sh.
 *
 * Each phase's line also says where the machine's CPU went per file: the
 * clients' own (their user and system time), the server's when
 * NFSMETA_SERVER_PID names it (all its threads), and the machine's in all
 * (busy share of every CPU, from /proc/stat); "rest" is what the machine
 * spent beyond those two, interrupts and other processes.
 *
 * With NFSMETA_XFS_DEV naming the XFS's block device (e.g. loop0), each
 * line also counts per file what made it durable: XFS log forces asked
 * for, log writes done (/sys/fs/xfs/DEV/stats/stats, line "log"), and the
 * device's cache flushes (/sys/block/DEV/stat): the figures that tell a
 * server's syncs from the file system's own.
 */
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <nfsc/libnfs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { CREATE, STAT, REMOVE, PHASES };
/* statfs(2)'s f_type of XFS. */
#define XFS_SUPER_MAGIC 0x58465342
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

/* One phase on the local file system; `dirfd` is the process's directory,
 * `id` the process's number. */
static void local_phase(int p, int dirfd, const char *dir, int id, long files, int durable)
{
	char name[64];
	struct stat st;
	struct statfs fs;
	if (fstatfs(dirfd, &fs) != 0)
		local_die("statfs", dir);
	/* The file's fsync commits its directory entry too (see the top). */
	int create_syncs_dir = fs.f_type != XFS_SUPER_MAGIC;
	for (long i = 0; i < files; i++) {
		snprintf(name, sizeof name, "f.%d.%ld", id, i);
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
		if (durable && (p == REMOVE || (p == CREATE && create_syncs_dir)) && fsync(dirfd) != 0)
			local_die("sync", dir);
	}
}

/* Waits on the client's own pipe until the parent starts the phase; its
 * start time. (With one pipe for all, a client done with a phase early
 * took another's byte and began the next phase while the others were
 * still in this one: fast phases, such as stat on a local file system,
 * then counted part of the next one.) */
static double await_phase(int go)
{
	char c;
	if (read(go, &c, 1) != 1)
		exit(1);
	return now();
}

/* This process's CPU time so far, in seconds. */
static double cpu_self(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The phase's start and end, and the CPU this client spent in it. */
static void report_times(int out, double t0, double cpu0)
{
	double t[3] = { t0, now(), cpu_self() - cpu0 };
	if (write(out, t, sizeof t) != sizeof t)
		exit(1);
}

/* The directory process `id` works in: its own, or with `shared` the one
 * all share (made by whichever process comes first). */
static void work_dir(char *dir, size_t size, const char *root, int id, int shared)
{
	if (shared)
		snprintf(dir, size, "%s/nfsmeta.%d", root, (int)getppid());
	else
		snprintf(dir, size, "%s/nfsmeta.%d.%d", root, (int)getppid(), id);
}

static void local_client(const char *root, int id, long files, int durable, int shared, int go, int out)
{
	char dir[4096];
	int dirfd;
	work_dir(dir, sizeof dir, root, id, shared);
	if ((mkdir(dir, 0755) != 0 && !(shared && errno == EEXIST)) || (dirfd = open(dir, O_RDONLY | O_DIRECTORY)) < 0)
		local_die("mkdir", dir);
	for (int p = 0; p < PHASES; p++) {
		double t0 = await_phase(go), cpu0 = cpu_self();
		local_phase(p, dirfd, dir, id, files, durable);
		report_times(out, t0, cpu0);
	}
	close(dirfd);
	/* Shared: the last process out removes it. */
	rmdir(dir);
	exit(0);
}

/* Runs each phase when the parent starts it, and writes the phase's start
 * and end times to `out`. */
static void client(const char *url, int id, long files, int shared, int go, int out)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *u;
	struct nfs_stat_64 dir_st;
	char dir[64], path[128];
	if (!nfs)
		die(NULL, "init");
	u = nfs_parse_url_dir(nfs, url);
	if (!u)
		die(nfs, "url");
	if (nfs_mount(nfs, u->server, u->path) != 0)
		die(nfs, "mount");
	work_dir(dir, sizeof dir, "", id, shared);
	/* Shared: another process may have made it first. */
	if (nfs_mkdir(nfs, dir) != 0 && !(shared && nfs_stat64(nfs, dir, &dir_st) == 0 && S_ISDIR(dir_st.nfs_mode)))
		die(nfs, "mkdir");
	for (int p = 0; p < PHASES; p++) {
		double t0 = await_phase(go), cpu0 = cpu_self();
		for (long i = 0; i < files; i++) {
			struct nfsfh *fh;
			struct nfs_stat_64 st;
			snprintf(path, sizeof path, "%s/f.%d.%ld", dir, id, i);
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
		report_times(out, t0, cpu0);
	}
	nfs_rmdir(nfs, dir);
	nfs_destroy_url(u);
	nfs_destroy_context(nfs);
	exit(0);
}

/* The machine's busy and total CPU time so far (all CPUs), in seconds. */
static void machine_cpu(double *busy, double *all)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
			 &v[5], &v[6], &v[7]) != 8) {
		fprintf(stderr, "nfsmeta: cannot read /proc/stat\n");
		exit(1);
	}
	fclose(f);
	double hz = sysconf(_SC_CLK_TCK);
	/* user nice system idle iowait irq softirq steal: idle and iowait are not busy */
	*busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
	*all = *busy + (v[3] + v[4]) / hz;
}

/* The CPU time of every thread of `pid` so far, in seconds (the
 * scheduler's own count, in nanoseconds; 0 without a server). */
static double server_cpu(const char *pid)
{
	char path[512];
	double sum = 0;
	if (!pid)
		return 0;
	snprintf(path, sizeof path, "/proc/%s/task", pid);
	DIR *d = opendir(path);
	if (!d) {
		fprintf(stderr, "nfsmeta: no server process %s\n", pid);
		exit(1);
	}
	for (struct dirent *e; (e = readdir(d));) {
		unsigned long long ns;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%s/task/%s/schedstat", pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (f && fscanf(f, "%llu", &ns) == 1)
			sum += ns / 1e9;
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

/* The XFS log's forces and writes and the device's flushes so far (zeros
 * without `dev`). */
struct durability {
	double forces, log_writes, flushes;
};

static struct durability durability_counts(const char *dev)
{
	struct durability d = { 0, 0, 0 };
	char path[512], line[512];
	if (!dev)
		return d;
	snprintf(path, sizeof path, "/sys/fs/xfs/%s/stats/stats", dev);
	FILE *f = fopen(path, "r");
	int found = 0;
	/* "log writes blocks noiclogs force force_sleep" */
	while (f && fgets(line, sizeof line, f)) {
		unsigned long long w, b, n, force, sleep;
		if (sscanf(line, "log %llu %llu %llu %llu %llu", &w, &b, &n, &force, &sleep) == 5) {
			d.log_writes = w;
			d.forces = force;
			found = 1;
		}
	}
	if (f)
		fclose(f);
	snprintf(path, sizeof path, "/sys/block/%s/stat", dev);
	f = fopen(path, "r");
	/* The 16th field: flush requests completed. */
	unsigned long long v[17];
	int n = 0;
	while (f && n < 17 && fscanf(f, "%llu", &v[n]) == 1)
		n++;
	if (f)
		fclose(f);
	if (!found || n < 16) {
		fprintf(stderr, "nfsmeta: NFSMETA_XFS_DEV=%s: no XFS log or flush counts\n", dev);
		exit(1);
	}
	d.flushes = v[15];
	return d;
}

int main(int argc, char **argv)
{
	int procs, (*go)[2], out[2];
	long files;
	int local = argc > 1 && argv[1][0] == '/';
	int durable = 0, shared = 0, usage = argc < 4;
	for (int i = 4; i < argc; i++) {
		if (local && strcmp(argv[i], "durable") == 0)
			durable = 1;
		else if (strcmp(argv[i], "shared") == 0)
			shared = 1;
		else
			usage = 1;
	}
	if (usage) {
		fprintf(stderr, "usage: nfsmeta nfs://SERVER/EXPORT PROCS FILES_PER_PROC [shared]\n"
				"       nfsmeta /LOCAL/DIR PROCS FILES_PER_PROC [durable] [shared]\n");
		return 2;
	}
	/* A client that died closes its end: report it, do not die of SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	procs = atoi(argv[2]);
	files = atol(argv[3]);
	if (procs < 1 || files < 1 || !(go = calloc(procs, sizeof *go)) || pipe(out))
		return 2;
	for (int i = 0; i < procs; i++)
		if (pipe(go[i]))
			return 2;
	for (int i = 0; i < procs; i++)
		if (fork() == 0) {
			/* Only its own pipe's read end: a parent gone is an end of file. */
			for (int j = 0; j < procs; j++) {
				close(go[j][1]);
				if (j != i)
					close(go[j][0]);
			}
			if (local)
				local_client(argv[1], i, files, durable, shared, go[i][0], out[1]);
			client(argv[1], i, files, shared, go[i][0], out[1]);
		}
	for (int i = 0; i < procs; i++)
		close(go[i][0]);
	close(out[1]);
	sleep(1); /* every client mounted and made its directory */
	const char *server = getenv("NFSMETA_SERVER_PID");
	const char *xfs_dev = getenv("NFSMETA_XFS_DEV");
	for (int p = 0; p < PHASES; p++) {
		double first = 1e300, last = 0, t[3], clients = 0, busy0, all0, busy1, all1;
		double server0 = server_cpu(server);
		struct durability d0 = durability_counts(xfs_dev);
		machine_cpu(&busy0, &all0);
		/* One byte per client starts the phase for all at once. */
		for (int i = 0; i < procs; i++)
			if (write(go[i][1], "g", 1) != 1) {
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
			clients += t[2];
		}
		machine_cpu(&busy1, &all1);
		struct durability d1 = durability_counts(xfs_dev);
		/* CPU seconds in all become µs per file. */
		double n = procs * files, per_file = 1e6 / n;
		double machine_us = (busy1 - busy0) * per_file, clients_us = clients * per_file;
		double server_us = (server_cpu(server) - server0) * per_file;
		printf("%s %.0f files/s  CPU per file: clients %.0f us, server %.0f us, rest %.0f us, machine %.0f us; busy %.0f %%",
		       phase_name[p], n / (last - first), clients_us, server_us, machine_us - clients_us - server_us,
		       /* a phase shorter than a clock tick of /proc/stat has no busy share */
		       machine_us, all1 > all0 ? 100 * (busy1 - busy0) / (all1 - all0) : NAN);
		if (xfs_dev)
			printf("; per file: log forces %.2f, log writes %.2f, flushes %.2f", (d1.forces - d0.forces) / n,
			       (d1.log_writes - d0.log_writes) / n, (d1.flushes - d0.flushes) / n);
		printf("\n");
		fflush(stdout);
	}
	int failed = 0, status;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	return failed;
}
