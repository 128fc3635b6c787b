#include "read_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>

namespace lenet {

namespace {

int read_one(const std::string& path, size_t max_bytes, std::string& out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    struct stat st{};
    int error = 0;
    if (::fstat(fd, &st) != 0) {
        error = errno;
    } else if (S_ISDIR(st.st_mode)) {
        error = EISDIR;
    } else if (S_ISREG(st.st_mode) && size_t(st.st_size) > max_bytes) {
        error = EFBIG;
    } else {
        // The size stat gives is a hint only: a pipe or a file that grows is read to its end.
        out.resize(S_ISREG(st.st_mode) ? size_t(st.st_size) + 1 : size_t(64) << 10);
        size_t got = 0;
        for (;;) {
            if (got == out.size()) {
                if (out.size() > max_bytes) {
                    error = EFBIG;
                    break;
                }
                out.resize(out.size() * 2);
            }
            const ssize_t n = ::read(fd, &out[got], out.size() - got);
            if (n < 0) {
                if (errno == EINTR) continue;
                error = errno;
                break;
            }
            if (n == 0) break;
            got += size_t(n);
        }
        out.resize(error ? 0 : got);
        if (!error && got > max_bytes) error = EFBIG;
    }
    ::close(fd);
    return error;
}

}  // namespace

std::vector<FileRead> read_files(const std::vector<std::string>& paths, size_t max_bytes) {
    std::vector<FileRead> out(paths.size());
    for (size_t i = 0; i < paths.size(); ++i) out[i].error = read_one(paths[i], max_bytes, out[i].data);
    return out;
}

GrayImagesRead read_gray_images(const std::vector<std::string>& paths, size_t max_bytes, int height, int width) {
    GrayImagesRead out{std::vector<FileRead>(paths.size()), GrayStack(paths.size(), height, width)};
    for (size_t i = 0; i < paths.size(); ++i) {
        FileRead& file = out.files[i];
        file.error = read_one(paths[i], max_bytes, file.data);
        if (!file.error && out.stack.add(i, file.data)) std::string().swap(file.data);
    }
    out.stack.finish();
    return out;
}

}  // namespace lenet
