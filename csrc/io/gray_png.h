// 8-bit grayscale PNGs of one known size decoded with no Python in the loop: the
// streaming pipeline's common case (a folder of MNIST-like 28x28 scans), read and
// decoded a chunk at a time with the GIL released. Anything else (another size, colour,
// 16 bits, interlacing, gamma or colour-space chunks, an EXIF orientation, a corrupt
// file) is left to the general path in Python (OpenCV), which decides what it means:
// this is a fast lane for files whose pixels are unambiguous, never a second decoder
// with its own rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lenet {

// What decodes PNGs here ("libpng 1.6.39", the library loaded at run time), or "" when
// this build has no decoder of its own (libpng was not found when it was built).
std::string gray_png_decoder();

// Decodes `data` into out[height * width] when it is a well-formed, non-interlaced,
// 8-bit grayscale PNG of exactly width x height with no chunk that changes how its
// pixels read (only IHDR, IDAT, IEND and text, time and pHYs chunks). Returns false,
// with `out` in an unspecified state, for anything else; never throws, never prints.
bool decode_gray_png(std::string_view data, int height, int width, uint8_t* out);

// Images decoded one after another into one stack: input i, when decode_gray_png takes
// it, becomes the next height x width bytes of `pixels` and rows[i] their index; -1
// for an input left to the caller.
struct GrayStack {
    GrayStack(size_t inputs, int height, int width);
    // Decodes input i (each at most once) onto the stack; whether it was taken.
    bool add(size_t i, std::string_view data);
    // Trims `pixels` to the decoded images.
    void finish();

    int height, width;
    std::vector<uint8_t> pixels;
    std::vector<int64_t> rows;
    size_t decoded = 0;
};

}  // namespace lenet
