// lenet's own model file (.lenet): a network the Python side has read from Keras or
// ONNX and checked, written out so that C++ can load it without Python (as ncnn's
// .param/.bin, a TensorRT plan or frugally-deep's JSON). What it holds is exactly what
// the Network is built from: the layer records (layer.h) with their Keras-layout
// weights, the model's Keras input shape, plus how pixels are prepared (a scale, and a
// mean and standard deviation per channel) and the model's name.
//
// Format, version 3. Every number little-endian; a "str" is u32 length + UTF-8 bytes:
//
//   magic      8 bytes  "LENETMDL"
//   version    u32      1, 2 or 3; a file of a newer version is refused, naming both
//   scale      f64      pixels 0..255 are multiplied by it (as a float32) before the network
//   normalize  (version 2 and later) u32 n (0..kMaxNormalized; version 2: 1..), then n x
//              f64 mean and n x f64 std: (x * scale - mean[c]) / std[c] for channel c, in
//              float32 (one value: every channel; none: no normalization)
//   name       str      the model's name (Keras'), for messages
//   source     str      the name of the file it was made from, for messages: no folders
//                       (version 3; files of versions 1 and 2 hold a path, of which the
//                       reader keeps the last part)
//   input      u32 rank, then rank x i64: Keras' per-sample input shape
//   layers     u32 count, then per layer:
//     fields   u32 count, then per field: str name, u8 type, value
//                type 0 str; 1 i32; 2 f32; 3 u8 (bool); 4 u32 n + n x i32 (lists, Int2, Int4)
//              fields are named, so that a field this reader lacks is an error naming
//              it and a field the file lacks keeps its default (LENET_LAYER_FIELDS);
//              a field at its default is not written, and none appears twice
//     weights  u32 count, then per weight: str name, u32 rank, rank x i64 dims,
//              then prod(dims) x f32 in row-major order
//   end        8 bytes  "LENETEND"
//   checksum   (version 3 and later) u32: the CRC-32 (zlib's, as PNG and gzip use it) of
//              every byte before it. Nothing may follow.
//
// The reader checks the checksum before it reads anything else (so damage is named as
// damage: a flipped bit anywhere, the header's included, is "damaged", never a model that
// loads and answers otherwise); then every count and size against csrc/net/limits.h
// (and the bounds in model_file.cpp) and against the bytes left before anything is
// allocated; then every value in the type the engine uses it in (the scale, mean and
// std as the float32s that prepare pixels). A corrupt, truncated or hostile file gives a
// ModelFileError naming the file, the place and what is wrong, never a crash or a large
// allocation. The Network then checks the graph, shapes and values as it does for a
// Keras file. The checksum finds damage, not tampering: anyone can write a file with a
// matching one, and such a file meets the same checks.
//
// The writer checks what it wrote with the reader itself (one set of checks): it never
// writes a file the reader refuses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "layer.h"

namespace lenet {

constexpr char kModelFileMagic[9] = "LENETMDL";
constexpr uint32_t kModelFileVersion = 3;
constexpr uint32_t kModelFileChecksumSince = 3;  // versions 1 and 2 carry no checksum
constexpr uint32_t kMaxNormalized = 4;           // channels of a normalized image (RGBA at most)

struct ModelFile {
    std::vector<LayerSpec> layers;
    std::vector<int64_t> input;  // Keras' per-sample input shape
    double input_scale = 1.0 / 255.0;  // as Python holds it; the network gets float(scale)
    std::vector<double> mean, std_dev;  // per channel (one: every channel); empty: none
    std::string name, source;
    uint32_t version = kModelFileVersion;  // as read (the writer writes kModelFileVersion)
};

// Whether `head` (a file's first bytes) starts with the magic.
bool is_model_file(std::string_view head);

// Parses a whole file's bytes; `where` names it in errors.
ModelFile model_file_parse(std::string_view data, const std::string& where);
// Reads and parses the file at `path` (opened, then checked to be a regular file of a
// bounded size, then read).
ModelFile model_file_read(const std::string& path);
// The bytes of `m` in the format above (the source reduced to its file name), checked by
// the reader; ModelFileError naming `where` and what the reader refuses.
std::string model_file_bytes(const ModelFile& m, const std::string& where);
// Writes `m` to `path`: to a new temporary file of a unique name beside it, flushed to
// the disk, then renamed over `path`. Nothing is left behind on failure; an Error names
// the call that failed.
void model_file_write(const std::string& path, const ModelFile& m);

// The float32 a 0..255 pixel value `v` becomes before the network: v * scale, then
// (x - mean) / std, rounded as Python's Preprocessing rounds it (the product first).
float prepared_pixel(int v, float scale, float mean, float std_dev);
// What is wrong with a preparation of pixels (a scale, then a mean and std per channel, or
// none), checked as the float32s the engine uses: a scale above 0, every value one that
// a float32 holds, every prepared pixel a number. Empty when nothing is. The reader's
// check, and Python's for an Engine's input_scale, mean and std.
std::string preparation_problem(double scale, const std::vector<double>& mean, const std::vector<double>& std_dev);

}  // namespace lenet
