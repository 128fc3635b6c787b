// lenet's own model file (.lenet): a network the Python side has read from Keras or
// ONNX and checked, written out so that C++ can load it without Python (as ncnn's
// .param/.bin, a TensorRT plan or frugally-deep's JSON). What it holds is exactly what
// the Network is built from: the layer records (layer.h) with their Keras-layout
// weights, the model's Keras input shape, plus how pixels are prepared (a scale, and a
// mean and standard deviation per channel) and the model's name.
//
// Format, version 2. Every number little-endian; a "str" is u32 length + bytes:
//
//   magic      8 bytes  "LENETMDL"
//   version    u32      1 or 2; a file of a newer version is refused, naming both
//   scale      f64      pixels 0..255 are multiplied by it before the network
//   normalize  (version 2 only) u32 n (1..kMaxNormalized), then n x f64 mean and n x f64
//              std: (x * scale - mean[c]) / std[c] for channel c, in float32 (one value:
//              every channel). A model without them is written as version 1, which a
//              lenet of before version 2 still reads
//   name       str      the model's name (Keras'), for messages
//   source     str      the file it was made from, for messages
//   input      u32 rank, then rank x i64: Keras' per-sample input shape
//   layers     u32 count, then per layer:
//     fields   u32 count, then per field: str name, u8 type, value
//                type 0 str; 1 i32; 2 f32; 3 u8 (bool); 4 u32 n + n x i32 (lists, Int2, Int4)
//              fields are named, so that a field this reader lacks is an error naming
//              it and a field the file lacks keeps its default (LENET_LAYER_FIELDS);
//              a field at its default is not written, so a model that uses no field
//              added since a lenet was released reads in that lenet
//     weights  u32 count, then per weight: str name, u32 rank, rank x i64 dims,
//              then prod(dims) x f32 in row-major order
//   end        8 bytes  "LENETEND"; nothing may follow
//
// Every count and size is checked against csrc/net/limits.h (and the bounds in
// model_file.cpp) and against the bytes left before anything is allocated: a corrupt,
// truncated or hostile file gives a ModelFileError naming the file, the place and what
// is wrong, never a crash or a large allocation. The Network then checks the graph,
// shapes and values as it does for a Keras file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "layer.h"

namespace lenet {

constexpr char kModelFileMagic[9] = "LENETMDL";
constexpr uint32_t kModelFileVersion = 2;
constexpr uint32_t kMaxNormalized = 4;  // channels of a normalized image (RGBA at most)

struct ModelFile {
    std::vector<LayerSpec> layers;
    std::vector<int64_t> input;  // Keras' per-sample input shape
    double input_scale = 1.0 / 255.0;  // as Python holds it; the network gets float(scale)
    std::vector<double> mean, std_dev;  // per channel (one: every channel); empty: none
    std::string name, source;
};

// Whether `head` (a file's first bytes) starts with the magic.
bool is_model_file(std::string_view head);

// Parses a whole file's bytes; `where` names it in errors.
ModelFile model_file_parse(std::string_view data, const std::string& where);
// Reads and parses the file at `path` (its size bounded before it is read).
ModelFile model_file_read(const std::string& path);
// The bytes of `m` in the format above.
std::string model_file_bytes(const ModelFile& m);
// Writes `m` to `path`: to a temporary file beside it, renamed when complete.
void model_file_write(const std::string& path, const ModelFile& m);

}  // namespace lenet
