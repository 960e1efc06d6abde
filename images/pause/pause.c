/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * Written for kopflet (no upstream code). It waits for signals synchronously with
 * sigwaitinfo() instead of doing work in asynchronous handlers:
 *   - SIGINT / SIGTERM: the runtime is tearing the sandbox down, so exit 0;
 *   - SIGCHLD: as PID 1 of a shared PID namespace we inherit orphans, so reap every
 *     exited child to keep zombies from piling up.
 * No-op handlers are still installed: a namespace's init process never receives a
 * signal whose disposition is SIG_DFL, and we must not depend on blocking alone.
 *
 * Not being PID 1 is only warned about, never fatal: a hostPID pod runs its sandbox
 * in the node's PID namespace, and that sandbox must stay up.
 *
 * Build: gcc -static -Os -s -o pause pause.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PAUSE_VERSION
#define PAUSE_VERSION "3.10.1"
#endif

static void ignore_signal(int sig) { (void)sig; }

/* Reap every child that has exited; never block. */
static void reap_children(void) {
  for (;;) {
    pid_t pid = waitpid(-1, NULL, WNOHANG);
    if (pid > 0) continue;
    if (pid < 0 && errno == EINTR) continue;
    return; /* 0: children still running; -1/ECHILD: none left */
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0) {
      printf("pause (kopflet) %s\n", PAUSE_VERSION);
      return 0;
    }
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: running as pid %d, not as pid 1\n", (int)getpid());
  }

  static const int sigs[] = {SIGINT, SIGTERM, SIGCHLD};
  sigset_t set;
  sigemptyset(&set);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = ignore_signal;
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
    sigaddset(&set, sigs[i]);
    if (sigaction(sigs[i], &sa, NULL) != 0) {
      perror("pause: sigaction");
      return 2;
    }
  }
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
    perror("pause: sigprocmask");
    return 2;
  }
  reap_children(); /* orphans that exited before SIGCHLD was blocked */

  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&set, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      perror("pause: sigwaitinfo");
      return 2;
    }
    if (sig == SIGCHLD) {
      reap_children();
      continue;
    }
    fprintf(stderr, "pause: got signal %d, exiting\n", sig);
    return 0;
  }
}
