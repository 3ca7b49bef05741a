/*
 * v4lock: NFSv4 byte-range locks and NFSv4.2 file operations, from the
 * test guest and from the server's host (nfs4_lock.rs builds it static).
 * Prints `RESULT key=value` lines; a lock that is refused says `errno N`.
 *
 *   v4lock try HOW FILE KEY       once, without waiting, a whole-file write
 *                                 lock by HOW: flock (flock(2)), posix
 *                                 (F_SETLK) or ofd (F_OFD_SETLK); KEY=ok or
 *                                 KEY=errno N; exits (releasing it)
 *   v4lock hold HOW FILE HELD GO [START LEN]
 *                                 takes the lock (waiting for it), creates
 *                                 HELD, waits until GO exists (at most 180
 *                                 s), unlocks; with START and LEN (posix
 *                                 and ofd only) over those bytes alone
 *   v4lock holdwrite FILE HELD GO takes a POSIX write lock on FILE (made if
 *                                 need be), writes a line and fsyncs,
 *                                 creates HELD, waits for GO (at most 180
 *                                 s), writes and fsyncs another line,
 *                                 unlocks and closes: every call checked
 *   v4lock lockwrite FILE SRC BLOCKS CONTROL
 *                                 takes a POSIX write lock on FILE (made if
 *                                 need be) and, holding it, writes 64 KiB
 *                                 blocks of SRC, each made stable by fsync
 *                                 before the next, cycling over BLOCKS, until
 *                                 CONTROL reads "stop" (at most 150 s); then
 *                                 unlocks: the HA lab's writer (as
 *                                 failover_writer.sh's dd loop) with a lock
 *                                 held through the failover
 *   v4lock alloc FILE OFF LEN     fallocate(2): space for the range (FILE
 *                                 made if need be)
 *   v4lock punch FILE OFF LEN     fallocate(2): PUNCH_HOLE | KEEP_SIZE
 *   v4lock seek FILE OFF WHAT     lseek(2) SEEK_DATA (WHAT data) or SEEK_HOLE
 *   v4lock copy SRC DST           copy_file_range(2) of all of SRC to DST
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)
/* lockwrite gives up after this long (the host then finds no "stopped"). */
#define LOCKWRITE_SECONDS 150

/* The range `lock` takes: the whole file unless `hold` is given one. */
static off_t range_start, range_len;

/* Takes (or, with `unlock`, releases) the write lock. */
static int lock(const char *how, int fd, int wait, int unlock) {
  struct flock f = { .l_type = unlock ? F_UNLCK : F_WRLCK, .l_whence = SEEK_SET, .l_start = range_start, .l_len = range_len };
  if (!strcmp(how, "flock")) return flock(fd, unlock ? LOCK_UN : LOCK_EX | (wait ? 0 : LOCK_NB));
  if (!strcmp(how, "posix")) return fcntl(fd, wait ? F_SETLKW : F_SETLK, &f);
  if (!strcmp(how, "ofd")) return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &f);
  errno = EINVAL;
  return -1;
}

static int fail(const char *key) {
  printf("RESULT %s=errno %d\n", key, errno);
  return 1;
}

/* CLOCK_MONOTONIC in centiseconds. */
static long long now_cs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 100LL + t.tv_nsec / 10000000;
}

/* Whether CONTROL says "stop" (opened anew each time: close-to-open
   makes each open see the host's change). */
static int told_to_stop(const char *control) {
  char buf[8] = { 0 };
  int fd = open(control, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n >= 4 && !strncmp(buf, "stop", 4);
}

static int lockwrite(const char *file, const char *src, long blocks, const char *control) {
  static char data[BLOCK];
  int in = open(src, O_RDONLY);
  int fd = open(file, O_RDWR | O_CREAT, 0644);
  if (in < 0 || fd < 0) return fail("error=open");
  if (lock("posix", fd, 1, 0) < 0) return fail("error=lock");
  printf("RESULT locked=1\nRESULT writing=1\n");
  long long start = now_cs(), last = start, max = 0, n = 0;
  while (now_cs() - start < LOCKWRITE_SECONDS * 100LL) {
    long i = n % blocks;
    if (pread(in, data, BLOCK, (off_t)i * BLOCK) != BLOCK) return fail("error=read source");
    if (pwrite(fd, data, BLOCK, (off_t)i * BLOCK) != BLOCK) {
      printf("RESULT error=write block %ld: errno %d\n", i, errno);
      return 1;
    }
    if (fsync(fd) < 0) {
      printf("RESULT error=fsync block %ld: errno %d\n", i, errno);
      return 1;
    }
    long long t = now_cs(), gap = t - last;
    if (gap > max) max = gap;
    last = t;
    if (gap > 50) printf("slow write at %lld cs: %lld cs\n", t - start, gap);
    if (n % 500 == 0) printf("write %lld at %lld cs\n", n, t - start);
    n++;
    if (told_to_stop(control)) {
      printf("RESULT stopped=1\n");
      break;
    }
  }
  printf("RESULT writes=%lld\nRESULT max_gap_cs=%lld\n", n, max);
  if (lock("posix", fd, 0, 1) < 0) return fail("error=unlock");
  if (close(fd) < 0) return fail("error=close");
  printf("RESULT unlocked=1\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  /* The console is a pipe: each line as it comes. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(argv[1], "lockwrite") && argc == 6) return lockwrite(argv[2], argv[3], atol(argv[4]), argv[5]);
  const char *op = argv[1];
  if (!strcmp(op, "try") && argc == 5) {
    int fd = open(argv[3], O_RDWR);
    if (fd < 0 || lock(argv[2], fd, 0, 0) < 0) return fail(argv[4]);
    printf("RESULT %s=ok\n", argv[4]);
    return 0;
  }
  if (!strcmp(op, "hold") && (argc == 6 || argc == 8)) {
    if (argc == 8) {
      range_start = atoll(argv[6]);
      range_len = atoll(argv[7]);
    }
    int fd = open(argv[3], O_RDWR);
    if (fd < 0 || lock(argv[2], fd, 1, 0) < 0) return fail("hold");
    int held = open(argv[4], O_WRONLY | O_CREAT, 0644);
    if (held < 0) return fail("held_signal");
    close(held);
    struct stat st;
    for (int i = 0; stat(argv[5], &st) < 0; i++) {
      if (i > 1800) { printf("RESULT hold=no go\n"); return 1; }
      usleep(100000);
    }
    /* An unlock of its own, which the NFS client waits for (the one a
       close makes may still be on its way when close returns). */
    if (lock(argv[2], fd, 0, 1) < 0) return fail("unlock");
    close(fd);
    printf("RESULT hold=ok\n");
    return 0;
  }
  if (!strcmp(op, "holdwrite") && argc == 5) {
    static const char first[] = "written before the restart\n", second[] = "written after the restart\n";
    int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail("open");
    if (lock("posix", fd, 1, 0) < 0) return fail("lock");
    if (write(fd, first, sizeof first - 1) != sizeof first - 1 || fsync(fd) < 0) return fail("first_write");
    int held = open(argv[3], O_WRONLY | O_CREAT, 0644);
    if (held < 0) return fail("held_signal");
    close(held);
    struct stat st;
    for (int i = 0; stat(argv[4], &st) < 0; i++) {
      if (i > 1800) { printf("RESULT holdwrite=no go\n"); return 1; }
      usleep(100000);
    }
    if (write(fd, second, sizeof second - 1) != sizeof second - 1 || fsync(fd) < 0) return fail("second_write");
    if (lock("posix", fd, 0, 1) < 0) return fail("unlock");
    if (close(fd) < 0) return fail("close");
    printf("RESULT holdwrite=ok\n");
    return 0;
  }
  if ((!strcmp(op, "alloc") || !strcmp(op, "punch")) && argc == 5) {
    int fd = open(argv[2], O_RDWR | O_CREAT, 0644);
    int mode = op[0] == 'p' ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE : 0;
    if (fd < 0 || fallocate(fd, mode, atoll(argv[3]), atoll(argv[4])) < 0) return fail(op);
    printf("RESULT %s=ok\n", op);
    return 0;
  }
  if (!strcmp(op, "seek") && argc == 5) {
    int fd = open(argv[2], O_RDONLY);
    off_t at = fd < 0 ? -1 : lseek(fd, atoll(argv[3]), !strcmp(argv[4], "data") ? SEEK_DATA : SEEK_HOLE);
    if (at < 0) return fail("seek");
    printf("RESULT seek_%s_%s=%lld\n", argv[4], argv[3], (long long)at);
    return 0;
  }
  if (!strcmp(op, "copy") && argc == 4) {
    int in = open(argv[2], O_RDONLY), out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0) return fail("copy");
    long long total = 0;
    for (;;) {
      ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
      if (n < 0) return fail("copy");
      if (n == 0) break;
      total += n;
    }
    if (fsync(out) < 0) return fail("copy");
    printf("RESULT copied=%lld\n", total);
    return 0;
  }
  return 2;
}
