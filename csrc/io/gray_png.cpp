#include "gray_png.h"

#include <algorithm>
#include <cstring>

#ifdef LENET_HAVE_PNG
#include <png.h>
#endif

namespace lenet {

namespace {

uint32_t be32(const unsigned char* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// The chunk walk decides whether the fast lane applies: every chunk length within the
// data, IHDR first with the expected size and form, and only chunks that do not change
// what the pixels mean. (OpenCV ignores gAMA/cHRM/iCCP too, but the rule here is
// simpler to state: any doubt goes to the general path.)
bool plain_gray_png(std::string_view data, int height, int width) {
    const auto* d = reinterpret_cast<const unsigned char*>(data.data());
    const size_t n = data.size();
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 8 + 25 || std::memcmp(d, signature, 8) != 0) return false;
    if (be32(d + 8) != 13 || std::memcmp(d + 12, "IHDR", 4) != 0) return false;
    if (be32(d + 16) != uint32_t(width) || be32(d + 20) != uint32_t(height)) return false;
    // bit depth 8, colour type 0 (gray), compression 0, filter 0, interlace 0
    if (d[24] != 8 || d[25] != 0 || d[26] != 0 || d[27] != 0 || d[28] != 0) return false;
    bool idat = false;
    for (size_t pos = 8; pos + 12 <= n;) {
        const uint32_t length = be32(d + pos);
        if (length > n - pos - 12) return false;
        const unsigned char* kind = d + pos + 4;
        if (std::memcmp(kind, "IEND", 4) == 0) return idat;
        if (std::memcmp(kind, "IDAT", 4) == 0) {
            idat = true;
        } else if (std::memcmp(kind, "IHDR", 4) != 0 || pos != 8) {
            static const char* const harmless[] = {"tEXt", "zTXt", "iTXt", "tIME", "pHYs"};
            bool known = false;
            for (const char* h : harmless) known = known || std::memcmp(kind, h, 4) == 0;
            if (!known) return false;
        }
        pos += 12 + size_t(length);
    }
    return false;   // no IEND: truncated
}

#ifdef LENET_HAVE_PNG

struct Source {
    const unsigned char* data;
    size_t size, pos;
};

void read_from_memory(png_structp png, png_bytep out, png_size_t length) {
    auto* s = static_cast<Source*>(png_get_io_ptr(png));
    if (length > s->size - s->pos) png_error(png, "truncated");
    std::memcpy(out, s->data + s->pos, length);
    s->pos += length;
}

// libpng reports errors by longjmp: these print nothing (the general path, given the
// same file, produces the message the user sees).
[[noreturn]] void on_error(png_structp png, png_const_charp) { png_longjmp(png, 1); }
void on_warning(png_structp, png_const_charp) {}

// Only trivially destructible locals between setjmp and any longjmp (C++ rule).
bool decode(Source* source, int height, int width, uint8_t* out) {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, on_error, on_warning);
    if (!png) return false;
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, nullptr, nullptr);
        return false;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, nullptr);
        return false;
    }
    png_set_read_fn(png, source, read_from_memory);
    png_read_info(png, info);
    if (png_get_image_width(png, info) != png_uint_32(width) ||
        png_get_image_height(png, info) != png_uint_32(height) || png_get_bit_depth(png, info) != 8 ||
        png_get_color_type(png, info) != PNG_COLOR_TYPE_GRAY ||
        png_get_interlace_type(png, info) != PNG_INTERLACE_NONE || png_get_rowbytes(png, info) != size_t(width)) {
        png_destroy_read_struct(&png, &info, nullptr);
        return false;
    }
    for (int y = 0; y < height; ++y) png_read_row(png, out + size_t(y) * size_t(width), nullptr);
    png_read_end(png, nullptr);   // the CRCs and chunks after the pixels, as OpenCV checks them
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
}

#endif

}  // namespace

std::string gray_png_decoder() {
#ifdef LENET_HAVE_PNG
    return std::string("libpng ") + png_get_libpng_ver(nullptr);
#else
    return "";
#endif
}

bool decode_gray_png(std::string_view data, int height, int width, uint8_t* out) {
    if (height < 1 || width < 1 || !plain_gray_png(data, height, width)) return false;
#ifdef LENET_HAVE_PNG
    Source source{reinterpret_cast<const unsigned char*>(data.data()), data.size(), 0};
    return decode(&source, height, width, out);
#else
    (void)out;
    return false;
#endif
}

GrayStack::GrayStack(size_t inputs, int height, int width) : height(height), width(width), rows(inputs, -1) {}

bool GrayStack::add(size_t i, std::string_view data) {
    const size_t image = size_t(height) * size_t(width);
    if (pixels.size() < (decoded + 1) * image) pixels.resize(std::max(pixels.size() * 2, (decoded + 1) * image));
    if (!decode_gray_png(data, height, width, &pixels[decoded * image])) return false;
    rows[i] = int64_t(decoded++);
    return true;
}

void GrayStack::finish() { pixels.resize(decoded * size_t(height) * size_t(width)); }

}  // namespace lenet
