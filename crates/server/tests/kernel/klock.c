/*
 * klock: byte-range (fcntl) locks from the test guest, built static by the
 * kernel-client locking tests. Prints `RESULT key=value` lines.
 *
 *   klock incr FILE N TAG       N times: lock FILE whole (F_SETLKW), read the
 *                               counter at offset 0, append record TAG+count
 *                               at 16*(count+1), write count+1, unlock
 *   klock fincr FILE N TAG      the same under flock(2) (which the Linux NFS
 *                               client sends as a whole-file NLM lock)
 *   klock hold FILE START LEN S lock (F_SETLKW), hold S seconds, unlock
 *   klock wait FILE START LEN   wait until someone holds the range (F_GETLK),
 *                               then F_SETLKW it, reporting how long it took
 *   klock try FILE START LEN    F_SETLK once: ok, or the error
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <unistd.h>

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

static int lk(int fd, int cmd, short type, off_t start, off_t len) {
  struct flock f = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
  return fcntl(fd, cmd, &f);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *op = argv[1];
  int fd = open(argv[2], O_RDWR | O_CREAT, 0666);
  if (fd < 0) { printf("RESULT open_errno=%d\n", errno); return 1; }
  if ((!strcmp(op, "incr") || !strcmp(op, "fincr")) && argc == 5) {
    int n = atoi(argv[3]), use_flock = op[0] == 'f';
    for (int i = 0; i < n; i++) {
      int r = use_flock ? flock(fd, LOCK_EX) : lk(fd, F_SETLKW, F_WRLCK, 0, 0);
      if (r < 0) { printf("RESULT incr_errno=%d\n", errno); return 1; }
      char buf[17] = { 0 };
      long c = 0;
      if (pread(fd, buf, 16, 0) == 16) c = atol(buf);
      char rec[17];
      snprintf(rec, sizeof rec, "%-7.7s%08ld\n", argv[4], c);
      if (pwrite(fd, rec, 16, 16 * (c + 1)) != 16) { printf("RESULT incr_write_errno=%d\n", errno); return 1; }
      snprintf(buf, sizeof buf, "%015ld\n", (c + 1) % 1000000000L);
      if (pwrite(fd, buf, 16, 0) != 16) { printf("RESULT incr_write_errno=%d\n", errno); return 1; }
      r = use_flock ? flock(fd, LOCK_UN) : lk(fd, F_SETLK, F_UNLCK, 0, 0);
      if (r < 0) { printf("RESULT unlock_errno=%d\n", errno); return 1; }
    }
    printf("RESULT %s_%s=done\n", op, argv[4]);
    return 0;
  }
  if (argc < 5) return 2;
  off_t start = atoll(argv[3]), len = atoll(argv[4]);
  if (!strcmp(op, "hold") && argc == 6) {
    if (lk(fd, F_SETLKW, F_WRLCK, start, len) < 0) { printf("RESULT hold_errno=%d\n", errno); return 1; }
    printf("RESULT held=1\n");
    fflush(stdout);
    sleep(atoi(argv[5]));
    char mark[] = "held by the holder\n";
    if (pwrite(fd, mark, sizeof mark - 1, start) < 0) printf("RESULT hold_write_errno=%d\n", errno);
    fsync(fd);
    lk(fd, F_SETLK, F_UNLCK, start, len);
    printf("RESULT released=1\n");
    return 0;
  }
  if (!strcmp(op, "wait")) {
    long long t0 = now_ms();
    for (;;) {
      struct flock f = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
      if (fcntl(fd, F_GETLK, &f) < 0) { printf("RESULT getlk_errno=%d\n", errno); return 1; }
      if (f.l_type != F_UNLCK) break;
      if (now_ms() - t0 > 120000) { printf("RESULT wait=never_held\n"); return 1; }
      usleep(200000);
    }
    long long t1 = now_ms();
    if (lk(fd, F_SETLKW, F_WRLCK, start, len) < 0) { printf("RESULT wait_errno=%d\n", errno); return 1; }
    long long t2 = now_ms();
    char buf[64] = { 0 };
    pread(fd, buf, sizeof buf - 1, start);
    buf[strcspn(buf, "\n")] = 0;
    printf("RESULT waited_ms=%lld\nRESULT seen_after_grant=%s\n", t2 - t1, buf);
    lk(fd, F_SETLK, F_UNLCK, start, len);
    return 0;
  }
  if (!strcmp(op, "try")) {
    int r = lk(fd, F_SETLK, F_WRLCK, start, len);
    printf("RESULT try=%s\n", r == 0 ? "ok" : (errno == EAGAIN || errno == EACCES) ? "denied" : strerror(errno));
    if (r == 0) lk(fd, F_SETLK, F_UNLCK, start, len);
    return 0;
  }
  return 2;
}
