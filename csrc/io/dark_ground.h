// Whether grayscale images look like MNIST's ground: the median of each image's
// outermost pixels (its border ring) below mid-gray. The same test as the Python
// path's for other inputs (lenet/preprocess.py, _dark_ground), exact on uint8, for the
// stacks of 8-bit gray images that take the fast lane (a counting sort per image).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lenet {

// pixels: n images of height x width bytes, packed; out[i]: image i's verdict. Needs
// height >= 2 and width >= 2 (the ring is then 2 * (height + width) - 4 pixels).
void dark_ground(const uint8_t* pixels, size_t n, int height, int width, bool* out);

// Whether one image is a clean drawing dark on light (lenet/images/pixels.py, clean_drawing,
// the same rule): every pixel of its ring at least `paper`, and one pixel below mid-gray.
bool clean_drawing(const uint8_t* pixels, int height, int width, int paper);

}  // namespace lenet
