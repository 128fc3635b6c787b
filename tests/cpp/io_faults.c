/* Faults put into a process's file calls (LD_PRELOAD), for tests/cpp/test_model_file.py:
 * what the .lenet writer and reader do when the disk or another process misbehaves.
 *
 *   LENET_FAULT_FSYNC=1      fsync of a file whose name holds ".lenet." fails with EIO
 *   LENET_FAULT_CLOSE=1      close of such a file closes it, then reports EIO (as NFS
 *                            reports a write that failed late)
 *   LENET_FAULT_FIFO=P:F     once a stat of P returns, the FIFO F is renamed over P: the
 *                            window between a check by name and an open
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_model_temp(int fd) {
    char link[64], name[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, name, sizeof name - 1);
    if (n <= 0) return 0;
    name[n] = 0;
    return strstr(name, ".lenet.") != NULL;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (getenv("LENET_FAULT_FSYNC") && is_model_temp(fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

int close(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
    if (getenv("LENET_FAULT_CLOSE") && is_model_temp(fd)) {
        real(fd);
        errno = EIO;
        return -1;
    }
    return real(fd);
}

int stat(const char* path, struct stat* st) {
    static int (*real)(const char*, struct stat*);
    if (!real) real = (int (*)(const char*, struct stat*))dlsym(RTLD_NEXT, "stat");
    const int r = real(path, st);
    const char* swap = getenv("LENET_FAULT_FIFO");
    const char* colon = swap ? strchr(swap, ':') : NULL;
    if (colon && strlen(path) == (size_t)(colon - swap) && strncmp(path, swap, colon - swap) == 0) {
        rename(colon + 1, path);
        unsetenv("LENET_FAULT_FIFO");
    }
    return r;
}
