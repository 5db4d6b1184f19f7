/*
 * An emulated network link between two TUN devices, for the test labs (test/helpers/impairedLink.ts
 * compiles and drives it). `tc qdisc … netem` needs a kernel built with CONFIG_NET_SCH_NETEM,
 * which CI machines may lack, so the impairments run here, in user space:
 *
 *   packet read from one device → random loss → bounded FIFO drained by a token bucket (rate
 *   limit) → delay + uniform jitter (packets overtake each other, as with netem's jitter) →
 *   written to the other device.
 *
 * Each direction (ab: read on A, written on B; ba: the reverse) has its own settings, queue,
 * bucket and counters.
 *
 *   impaired-link <netns A> <device A> <netns B> <device B> <seed>
 *
 * A netns is a path (/run/netns/<name>, /proc/<pid>/ns/net). The process creates each device in
 * its namespace (TUNSETIFF after setns), prints `ready`, then reads commands on stdin, one a line,
 * and answers each with one line on stdout:
 *
 *   set <ab|ba|both> [delay=<ms>] [jitter=<ms>] [loss=<percent>] [rate=<kbit/s, 0 = none>] [queue=<bytes>]
 *       → ok
 *   stats → {"ab":{…},"ba":{…}}
 *
 * It exits on end of stdin (the devices vanish with it). Errors go to stderr with exit status 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_PACKET 2048   /* bytes; TUN MTU is 1500 */
#define HEAP_CAP 16384    /* packets in flight (delayed) per direction: 16384 × 1500 B ≈ 200 Mb/s × 100 ms */
#define FIFO_CAP 8192     /* packets waiting for the rate limit per direction (also bounded by bytes) */
#define BURST_BYTES 1600  /* the token bucket holds one full packet: a serialising link, no bursts */
#define READS_PER_WAKE 64 /* packets read from one device before looking at the other */

struct packet {
  uint64_t due;  /* ns, CLOCK_MONOTONIC: when it leaves the delay line */
  uint64_t seq;  /* arrival order: equal due times leave in order */
  uint16_t len;
  unsigned char data[];
};

struct direction {
  const char *name;
  int in, out;
  /* settings */
  double delay_ms, jitter_ms, loss_pct, rate_kbps;
  uint64_t queue_limit; /* bytes */
  /* rate limit: FIFO (ring) and token bucket */
  struct packet *fifo[FIFO_CAP];
  unsigned fifo_head, fifo_len;
  uint64_t fifo_bytes;
  double tokens; /* bytes */
  uint64_t refilled_at;
  /* delay line: binary min-heap on (due, seq) */
  struct packet *heap[HEAP_CAP];
  unsigned heap_len;
  /* counters */
  uint64_t received, lost, queue_drops, overflow, sent, sent_bytes, write_errors;
};

static uint64_t rng_state;
static uint64_t seq_counter;

static double rnd(void) { /* xorshift64*, uniform in [0, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "impaired-link: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int open_tun(const char *netns, const char *dev) {
  int nsfd = open(netns, O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) die(netns);
  if (setns(nsfd, CLONE_NEWNET) < 0) die("setns");
  close(nsfd);
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) die("/dev/net/tun");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  strncpy(ifr.ifr_name, dev, IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF");
  return fd;
}

static int before(const struct packet *a, const struct packet *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void heap_push(struct direction *d, struct packet *p) {
  unsigned i = d->heap_len++;
  d->heap[i] = p;
  while (i > 0) {
    unsigned up = (i - 1) / 2;
    if (!before(d->heap[i], d->heap[up])) break;
    struct packet *t = d->heap[up];
    d->heap[up] = d->heap[i];
    d->heap[i] = t;
    i = up;
  }
}

static struct packet *heap_pop(struct direction *d) {
  struct packet *top = d->heap[0];
  d->heap[0] = d->heap[--d->heap_len];
  unsigned i = 0;
  for (;;) {
    unsigned l = 2 * i + 1, r = l + 1, m = i;
    if (l < d->heap_len && before(d->heap[l], d->heap[m])) m = l;
    if (r < d->heap_len && before(d->heap[r], d->heap[m])) m = r;
    if (m == i) break;
    struct packet *t = d->heap[m];
    d->heap[m] = d->heap[i];
    d->heap[i] = t;
    i = m;
  }
  return top;
}

/* Into the delay line: the packet leaves after delay ± jitter (never before now). */
static void delay_packet(struct direction *d, struct packet *p, uint64_t now) {
  if (d->heap_len == HEAP_CAP) {
    d->overflow++;
    free(p);
    return;
  }
  double ms = d->delay_ms + (d->jitter_ms > 0 ? (rnd() * 2 - 1) * d->jitter_ms : 0);
  p->due = now + (ms > 0 ? (uint64_t)(ms * 1e6) : 0);
  heap_push(d, p);
}

static void refill(struct direction *d, uint64_t now) {
  if (d->rate_kbps <= 0) return;
  d->tokens += (double)(now - d->refilled_at) * 1e-9 * d->rate_kbps * 1000 / 8;
  if (d->tokens > BURST_BYTES) d->tokens = BURST_BYTES;
  d->refilled_at = now;
}

/* Moves what the token bucket allows from the FIFO into the delay line. */
static void drain_fifo(struct direction *d, uint64_t now) {
  refill(d, now);
  while (d->fifo_len > 0) {
    struct packet *p = d->fifo[d->fifo_head];
    if (d->rate_kbps > 0 && d->tokens < p->len) break;
    d->tokens -= d->rate_kbps > 0 ? p->len : 0;
    d->fifo_head = (d->fifo_head + 1) % FIFO_CAP;
    d->fifo_len--;
    d->fifo_bytes -= p->len;
    delay_packet(d, p, now);
  }
}

static void receive(struct direction *d, uint64_t now) {
  for (int i = 0; i < READS_PER_WAKE; i++) {
    unsigned char buf[MAX_PACKET];
    ssize_t n = read(d->in, buf, sizeof buf);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      die("read");
    }
    if (n == 0) return;
    d->received++;
    if (d->loss_pct > 0 && rnd() * 100 < d->loss_pct) {
      d->lost++;
      continue;
    }
    struct packet *p = malloc(sizeof *p + (size_t)n);
    if (!p) die("malloc");
    p->len = (uint16_t)n;
    p->seq = seq_counter++;
    memcpy(p->data, buf, (size_t)n);
    if (d->rate_kbps <= 0 && d->fifo_len == 0) {
      delay_packet(d, p, now);
      continue;
    }
    if (d->fifo_len == FIFO_CAP || d->fifo_bytes + p->len > d->queue_limit) {
      d->queue_drops++;
      free(p);
      continue;
    }
    d->fifo[(d->fifo_head + d->fifo_len) % FIFO_CAP] = p;
    d->fifo_len++;
    d->fifo_bytes += p->len;
  }
}

static void transmit(struct direction *d, uint64_t now) {
  while (d->heap_len > 0 && d->heap[0]->due <= now) {
    struct packet *p = heap_pop(d);
    if (write(d->out, p->data, p->len) == (ssize_t)p->len) {
      d->sent++;
      d->sent_bytes += p->len;
    } else {
      d->write_errors++;
    }
    free(p);
  }
}

/* ns until this direction next has something to do; UINT64_MAX: nothing pending. */
static uint64_t next_event(const struct direction *d, uint64_t now) {
  uint64_t next = UINT64_MAX;
  if (d->heap_len > 0) next = d->heap[0]->due > now ? d->heap[0]->due - now : 0;
  if (d->fifo_len > 0 && d->rate_kbps > 0) {
    double missing = (double)d->fifo[d->fifo_head]->len - d->tokens;
    uint64_t wait = missing > 0 ? (uint64_t)(missing * 8 / (d->rate_kbps * 1000) * 1e9) + 1 : 0;
    if (wait < next) next = wait;
  }
  return next;
}

static void print_direction(const struct direction *d) {
  printf("\"%s\":{\"received\":%llu,\"lost\":%llu,\"queueDrops\":%llu,\"overflow\":%llu,\"sent\":%llu,\"sentBytes\":%llu,\"writeErrors\":%llu,\"queuedBytes\":%llu,\"inFlight\":%u}",
         d->name, (unsigned long long)d->received, (unsigned long long)d->lost, (unsigned long long)d->queue_drops, (unsigned long long)d->overflow,
         (unsigned long long)d->sent, (unsigned long long)d->sent_bytes, (unsigned long long)d->write_errors, (unsigned long long)d->fifo_bytes, d->heap_len);
}

/* Applies `key=value` settings to a direction; returns 0 on an unknown key or bad number. */
static int apply(struct direction *d, char *args, uint64_t now) {
  for (char *tok = strtok(args, " \t"); tok; tok = strtok(NULL, " \t")) {
    char *eq = strchr(tok, '=');
    if (!eq) return 0;
    *eq = 0;
    char *end;
    double v = strtod(eq + 1, &end);
    if (*end || v < 0) return 0;
    if (!strcmp(tok, "delay")) d->delay_ms = v;
    else if (!strcmp(tok, "jitter")) d->jitter_ms = v;
    else if (!strcmp(tok, "loss")) d->loss_pct = v;
    else if (!strcmp(tok, "rate")) {
      refill(d, now);
      d->rate_kbps = v;
      d->refilled_at = now;
    } else if (!strcmp(tok, "queue")) d->queue_limit = (uint64_t)v;
    else return 0;
    *eq = '=';
  }
  return 1;
}

static void command(char *line, struct direction *ab, struct direction *ba, uint64_t now) {
  if (!strcmp(line, "stats")) {
    printf("{");
    print_direction(ab);
    printf(",");
    print_direction(ba);
    printf("}\n");
  } else if (!strncmp(line, "set ", 4)) {
    char *rest = line + 4;
    char *sp = strchr(rest, ' ');
    char which[8] = {0};
    size_t n = sp ? (size_t)(sp - rest) : strlen(rest);
    if (n >= sizeof which) n = sizeof which - 1;
    memcpy(which, rest, n);
    char *args = sp ? sp + 1 : rest + n;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", args);
    int ok = 1;
    if (!strcmp(which, "ab") || !strcmp(which, "both")) ok = ok && apply(ab, args, now);
    if (!strcmp(which, "ba") || !strcmp(which, "both")) ok = ok && apply(ba, copy, now);
    if (strcmp(which, "ab") && strcmp(which, "ba") && strcmp(which, "both")) ok = 0;
    printf(ok ? "ok\n" : "error bad set: %s\n", line);
  } else {
    printf("error unknown command: %s\n", line);
  }
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: impaired-link <netns A> <device A> <netns B> <device B> <seed>\n");
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test that started it */
  /* The link must keep its timing while the machine is busy with what runs across it (netem runs
   * in the kernel): a starved forwarder would delay packets more than set, and lose the rate
   * limit's tokens (the bucket holds one packet). Real-time priority, best effort (root only); it
   * sleeps in ppoll between packets, and the kernel's RT throttling bounds it anyway. */
  struct sched_param rt = {.sched_priority = 1};
  if (sched_setscheduler(0, SCHED_FIFO, &rt) < 0) fprintf(stderr, "impaired-link: no real-time priority (%s): timing may drift under load\n", strerror(errno));
  signal(SIGPIPE, SIG_IGN);
  rng_state = strtoull(argv[5], NULL, 10) * 2654435761ULL + 0x9E3779B97F4A7C15ULL;
  int a = open_tun(argv[1], argv[2]);
  int b = open_tun(argv[3], argv[4]);
  static struct direction ab, ba;
  uint64_t now = now_ns();
  ab = (struct direction){.name = "ab", .in = a, .out = b, .queue_limit = 64 * 1024, .refilled_at = now};
  ba = (struct direction){.name = "ba", .in = b, .out = a, .queue_limit = 64 * 1024, .refilled_at = now};
  printf("ready\n");
  fflush(stdout);

  char line[1024];
  size_t line_len = 0;
  for (;;) {
    now = now_ns();
    uint64_t wait = next_event(&ab, now);
    uint64_t w2 = next_event(&ba, now);
    if (w2 < wait) wait = w2;
    struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ULL), .tv_nsec = (long)(wait % 1000000000ULL)};
    struct pollfd fds[3] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
    if (ppoll(fds, 3, wait == UINT64_MAX ? NULL : &ts, NULL) < 0 && errno != EINTR) die("ppoll");
    now = now_ns();
    if (fds[0].revents & POLLIN) receive(&ab, now);
    if (fds[1].revents & POLLIN) receive(&ba, now);
    if (fds[2].revents & (POLLIN | POLLHUP)) {
      ssize_t n = read(0, line + line_len, sizeof line - 1 - line_len);
      if (n <= 0) return 0; /* stdin closed: the test is done with the link */
      line_len += (size_t)n;
      line[line_len] = 0;
      char *nl;
      while ((nl = strchr(line, '\n'))) {
        *nl = 0;
        command(line, &ab, &ba, now);
        size_t used = (size_t)(nl - line) + 1;
        memmove(line, nl + 1, line_len - used + 1);
        line_len -= used;
      }
      if (line_len == sizeof line - 1) line_len = 0; /* an overlong line: dropped */
    }
    drain_fifo(&ab, now);
    drain_fifo(&ba, now);
    transmit(&ab, now);
    transmit(&ba, now);
  }
}
