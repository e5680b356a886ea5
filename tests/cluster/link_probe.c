/* link_probe.c — the rate of a TCP link, for tests/cluster/nodes_test.
 *
 *   link_probe recv PORT            accepts one connection, counts what
 *                                   arrives until it closes, answers the
 *                                   count and exits
 *   link_probe send HOST PORT MIB   sends MIB MiB, reads the count back and
 *                                   prints "probe: N bytes in S s: R Gbit/s"
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int recv_mode(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port), a.sin_addr.s_addr = INADDR_ANY;
  if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) {
    perror("link_probe recv");
    return 1;
  }
  int c = accept(s, NULL, NULL);
  if (c < 0) {
    perror("link_probe accept");
    return 1;
  }
  static char buf[1 << 20];
  long long n = 0;
  for (ssize_t k; (k = read(c, buf, sizeof buf)) > 0;) n += k;
  char msg[32];
  int len = snprintf(msg, sizeof msg, "%lld", n);
  if (write(c, msg, (size_t)len) != len) return 1;
  close(c);
  close(s);
  return 0;
}

static int send_mode(const char* host, const char* port, int mib) {
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_INET, hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, port, &hints, &ai) != 0) {
    fprintf(stderr, "link_probe: cannot resolve %s\n", host);
    return 1;
  }
  int s = -1;
  for (int tries = 0; tries < 50; tries++) { /* the receiver may still be starting */
    s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) break;
    close(s), s = -1;
    usleep(100000);
  }
  freeaddrinfo(ai);
  if (s < 0) {
    perror("link_probe connect");
    return 1;
  }
  static char buf[1 << 20];
  memset(buf, 'x', sizeof buf);
  double t = now();
  for (int i = 0; i < mib; i++)
    for (size_t off = 0; off < sizeof buf;) {
      ssize_t k = write(s, buf + off, sizeof buf - off);
      if (k <= 0) {
        perror("link_probe send");
        return 1;
      }
      off += (size_t)k;
    }
  shutdown(s, SHUT_WR);
  char msg[32] = {0};
  if (read(s, msg, sizeof msg - 1) <= 0) {
    fprintf(stderr, "link_probe: no count back\n");
    return 1;
  }
  double dt = now() - t;
  long long got = atoll(msg);
  printf("probe: %lld bytes in %.3f s: %.2f Gbit/s\n", got, dt, (double)got * 8 / dt / 1e9);
  close(s);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "recv") == 0) return recv_mode(atoi(argv[2]));
  if (argc == 5 && strcmp(argv[1], "send") == 0) return send_mode(argv[2], argv[3], atoi(argv[4]));
  fprintf(stderr, "usage: link_probe recv PORT | send HOST PORT MIB\n");
  return 2;
}
