// Whole files read into memory, many per call, with no Python in the loop: the
// streaming pipeline's readers read a chunk of image files in one call with the GIL
// released (opening and reading a small file from Python costs twice the syscalls'
// time, and every call gives the GIL up and takes it back).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gray_png.h"

namespace lenet {

struct FileRead {
    std::string data;   // the file's bytes, when error == 0
    int error = 0;      // an errno value: ENOENT, EISDIR, EFBIG (larger than max_bytes), ...
};

// Reads each path (bytes as the OS takes them) whole; never throws for a file that
// cannot be read (its errno is in its entry).
std::vector<FileRead> read_files(const std::vector<std::string>& paths, size_t max_bytes);

// read_files, and each file that decode_gray_png takes decoded as it is read onto
// `stack` (its bytes dropped); a file left to the caller keeps its bytes or errno in
// `files`, as read_files gives them.
struct GrayImagesRead {
    std::vector<FileRead> files;
    GrayStack stack;
};
GrayImagesRead read_gray_images(const std::vector<std::string>& paths, size_t max_bytes, int height, int width);

}  // namespace lenet
