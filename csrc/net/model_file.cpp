// The .lenet file format (model_file.h): a bounded reader, and a writer that the
// reader checks.
#include "model_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bitset>
#include <cerrno>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>

#include "../support/errors.h"
#include "../support/format.h"
#include "limits.h"

namespace lenet {
namespace {

// The record's fields, counted: a layer holds each at most once.
#define LENET_COUNT_FIELD(type, f, init, doc) +1
constexpr int kFields = 0 LENET_LAYER_FIELDS(LENET_COUNT_FIELD);
#undef LENET_COUNT_FIELD

// Bounds of the format itself (the model's are limits.h's).
constexpr uint32_t kMaxString = 1 << 16;  // names, activations, sources: far above any real one
constexpr uint32_t kMaxList = limits::kInputs;  // inputs of a merge; axes, shapes are shorter
constexpr uint32_t kMaxWeights = 64;      // per layer; a layer has at most a handful
constexpr uint32_t kMaxRank = 8;          // of a weight or the input
// The largest file: every parameter as a float plus its records.
constexpr int64_t kMaxFileBytes = limits::kParams * 4 + (int64_t(64) << 20);
constexpr char kEnd[9] = "LENETEND";
constexpr size_t kHeader = 12;  // magic, version

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format's numbers are written as the host holds them");

// ---- CRC-32: zlib's (the reflected polynomial 0xEDB88320), eight bytes a step.

struct Crc32Tables {
    // t[0][b]: the CRC step of byte b; t[k][b]: of byte b followed by k zero bytes.
    uint32_t t[8][256] = {};
    constexpr Crc32Tables() {
        for (uint32_t b = 0; b < 256; ++b) {
            uint32_t c = b;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[0][b] = c;
        }
        for (int k = 1; k < 8; ++k)
            for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
};
constexpr Crc32Tables kCrc32;

// The CRC-32 of `data` continued from `crc` (0 to start): zlib's crc32(crc, data).
uint32_t crc32_update(uint32_t crc, std::string_view data) {
    const auto& t = kCrc32.t;
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    size_t n = data.size();
    crc = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
              t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    }
    for (; n; ++p, --n) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

std::string hex32(uint32_t v) {
    char buf[8];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, 16);
    const std::string digits(buf, r.ptr);
    return "0x" + std::string(8 - digits.size(), '0') + digits;
}

uint32_t le32(std::string_view data, size_t at) {
    uint32_t v;
    std::memcpy(&v, data.data() + at, 4);
    return v;
}

// The header a version-3 file starts with.
std::string header_v3() {
    std::string h(kModelFileMagic, 8);
    const uint32_t v = kModelFileVersion;
    h.append(reinterpret_cast<const char*>(&v), 4);
    return h;
}

// Whether `data` is a file of this version whose header (magic, version) was changed
// after it was written: its checksum holds for the bytes with this version's header.
bool header_damaged(std::string_view data) {
    const std::string h = header_v3();
    if (data.size() < kHeader + 4 || data.substr(0, kHeader) == h) return false;
    const uint32_t crc = crc32_update(crc32_update(0, h), data.substr(kHeader, data.size() - kHeader - 4));
    return crc == le32(data, data.size() - 4);
}

// The last part of a path: what a file records of where it was made.
std::string_view file_name(std::string_view path) {
    const auto cut = path.find_last_of('/');
    return cut == std::string_view::npos ? path : path.substr(cut + 1);
}

// Well-formed UTF-8: no stray continuation bytes, overlong forms, surrogates or code points past U+10FFFF.
bool valid_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

enum Type : uint8_t { t_str = 0, t_int = 1, t_float = 2, t_bool = 3, t_list = 4 };

// ---- writing

struct Writer {
    const std::string& where;
    std::string out;
    void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
    template <class T>
    void le(T v) {  // the host is little-endian (asserted above): bytes as they are
        static_assert(std::is_arithmetic_v<T>);
        raw(&v, sizeof v);
    }
    // A count or length, refused where u32 cannot hold it (the reader's limits, far
    // below, then refuse the rest).
    void count(size_t n, const char* what) {
        if (n > UINT32_MAX)
            throw ModelFileError(where + ": cannot be written as a .lenet file: " + what + " of " + number_str(n) +
                                 ", more than the format holds");
        le<uint32_t>(uint32_t(n));
    }
    void str(std::string_view s, const char* what) {
        count(s.size(), what);
        raw(s.data(), s.size());
    }
    void list(const int* v, size_t n) {
        le<uint8_t>(t_list);
        count(n, "a list");
        for (size_t i = 0; i < n; ++i) le<int32_t>(v[i]);
    }
    void field(const std::string& v) {
        le<uint8_t>(t_str);
        str(v, "a field");
    }
    void field(int v) {
        le<uint8_t>(t_int);
        le<int32_t>(v);
    }
    void field(float v) {
        le<uint8_t>(t_float);
        le<float>(v);
    }
    void field(bool v) {
        le<uint8_t>(t_bool);
        le<uint8_t>(v ? 1 : 0);
    }
    void field(const std::vector<int>& v) { list(v.data(), v.size()); }
    void field(const Int2& v) { list(v.data(), v.size()); }
    void field(const Int4& v) { list(v.data(), v.size()); }
};

// ---- reading

// Reading a file, or checking the bytes the writer made (weights are then passed over,
// and a failure is the writer's).
enum class Mode { read, check };

class Reader {
public:
    Reader(std::string_view data, const std::string& where, Mode mode) : data_(data), where_(where), mode_(mode) {}

    // The text of a failure is made here only: a file that passes makes no messages.
    [[noreturn]] void fail(const std::string& what) const {
        std::string place;
        if (layer >= 0) {
            place = "layer " + number_str(layer);
            if (layer_name && !layer_name->empty()) place += " ('" + *layer_name + "')";
            if (item_kind) place += std::string(", ") + item_kind + " '" + std::string(item) + "'";
            place += ": ";
        }
        if (mode_ == Mode::check)
            throw ModelFileError(where_ + ": cannot be written as a .lenet file: " + place + what);
        throw ModelFileError(where_ + ": " + place + what + " (at byte " + number_str(pos_) + " of " +
                             number_str(data_.size()) + "; not a lenet model file, or a damaged one)");
    }
    size_t left() const { return end_ - pos_; }
    bool reads_weights() const { return mode_ == Mode::read; }
    // The bytes the format may use: all but a checksum at the end.
    void stop_at(size_t end) { end_ = end; }
    void need(uint64_t n, const char* what) const {
        if (n > left())
            fail(std::string("truncated: ") + what + " needs " + number_str(n) + " bytes, " + number_str(left()) +
                 " left");
    }
    std::string_view bytes(size_t n, const char* what) {
        need(n, what);
        auto v = data_.substr(pos_, n);
        pos_ += n;
        return v;
    }
    template <class T>
    T le(const char* what) {
        T v;
        std::memcpy(&v, bytes(sizeof v, what).data(), sizeof v);
        return v;
    }
    uint32_t count(uint32_t most, const char* what) {
        const auto n = le<uint32_t>(what);
        if (n > most) fail(std::string(what) + ": " + number_str(n) + " is over the limit of " + number_str(most));
        return n;
    }
    // Text is UTF-8 (Python reads it as str): anything else is damage.
    std::string str(const char* what) {
        const auto n = le<uint32_t>(what);
        if (n > kMaxString)
            fail(std::string(what) + ": " + number_str(n) + " bytes, over the limit of " + number_str(kMaxString));
        std::string s(bytes(n, what));
        if (!valid_utf8(s)) fail(std::string(what) + " is not UTF-8 text");
        return s;
    }
    void type(Type want) {
        const auto t = le<uint8_t>("a field's type");
        if (t != want) fail("type " + number_str(int(t)) + ", expected " + number_str(int(want)));
    }
    std::vector<int> list(uint32_t exact = 0) {
        type(t_list);
        const auto n = count(kMaxList, "the list's length");
        if (exact && n != exact) fail(number_str(n) + " values, expected " + number_str(exact));
        need(uint64_t(n) * 4, "the list");
        std::vector<int> v(n);
        for (auto& x : v) x = le<int32_t>("the list");
        return v;
    }
    void field(std::string& v) {
        type(t_str);
        v = str("the value");
    }
    void field(int& v) {
        type(t_int);
        v = le<int32_t>("the value");
    }
    void field(float& v) {
        type(t_float);
        v = le<float>("the value");
    }
    void field(bool& v) {
        type(t_bool);
        const auto b = le<uint8_t>("the value");
        if (b > 1) fail("a bool of value " + number_str(int(b)));
        v = b == 1;
    }
    void field(std::vector<int>& v) { v = list(); }
    void field(Int2& v) {
        auto l = list(2);
        v = {l[0], l[1]};
    }
    void field(Int4& v) {
        auto l = list(4);
        v = {l[0], l[1], l[2], l[3]};
    }

    // Where the reader is, for messages: the layer, its name once read, the field or
    // weight being read.
    int layer = -1;
    const std::string* layer_name = nullptr;
    const char* item_kind = nullptr;  // "field", "weight" or null
    std::string_view item;

private:
    std::string_view data_;
    const std::string& where_;
    Mode mode_;
    size_t pos_ = 0;
    size_t end_ = data_.size();
};

LayerSpec read_layer(Reader& r, int64_t& params) {
    LayerSpec l;
    r.layer_name = &l.name;
    const auto fields = r.count(kFields, "the field count");
    std::bitset<kFields> seen;
    for (uint32_t i = 0; i < fields; ++i) {
        const auto name = r.str("a field name");
        int k = 0;
        bool known = false;
#define LENET_READ_FIELD(type, f, init, doc)          \
    if (!known && name == #f) {                       \
        known = true;                                 \
        r.item_kind = "field";                        \
        r.item = #f;                                  \
        if (seen[size_t(k)]) r.fail("appears twice"); \
        seen[size_t(k)] = true;                       \
        r.field(l.f);                                 \
    }                                                 \
    ++k;
        LENET_LAYER_FIELDS(LENET_READ_FIELD)
#undef LENET_READ_FIELD
        if (!known) r.fail("unknown field '" + name + "' (a file of a newer lenet?)");
        r.item_kind = nullptr;
    }
    const auto weights = r.count(kMaxWeights, "the weight count");
    l.weights.reserve(weights);
    for (uint32_t i = 0; i < weights; ++i) {
        auto name = r.str("a weight name");
        r.item_kind = "weight";
        r.item = name;
        Tensor t;
        const auto rank = r.count(kMaxRank, "the rank");
        t.shape.reserve(rank);
        int64_t n = 1;
        for (uint32_t d = 0; d < rank; ++d) {
            const auto dim = r.le<int64_t>("a dimension");
            if (dim < 0 || dim > limits::kParams) r.fail("dimension " + number_str(dim) + " out of range");
            n *= dim;
            if (n > limits::kParams) break;  // checked below; never overflows
            t.shape.push_back(dim);
        }
        params += n;
        if (n > limits::kParams || params > limits::kParams)
            r.fail("the model would hold over " + grouped_str(limits::kParams) + " parameters");
        const auto values = r.bytes(size_t(n) * 4, "the values");
        if (r.reads_weights()) {
            t.data.resize(size_t(n));
            std::memcpy(t.data.data(), values.data(), values.size());
        }
        r.item_kind = nullptr;
        l.weights.emplace_back(std::move(name), std::move(t));
    }
    // Each name once: sorted, then each compared with the next (n log n compares, not n^2).
    std::vector<std::string_view> names;
    names.reserve(l.weights.size());
    for (const auto& w : l.weights) names.push_back(w.first);
    std::sort(names.begin(), names.end());
    const auto twice = std::adjacent_find(names.begin(), names.end());
    if (twice != names.end()) {
        r.item_kind = "weight";
        r.item = *twice;
        r.fail("appears twice");
    }
    r.layer_name = nullptr;
    return l;
}

// Whether a double converts to a float: C++ leaves the conversion of one outside
// float's range undefined.
bool fits_float(double v) { return std::isfinite(v) && std::fabs(v) <= double(FLT_MAX); }

// A file of a format Python reads (Keras' HDF5 or .keras, ONNX), by its signature or, for
// ONNX (a protobuf, no signature), its name: what it is, or null for anything else.
const char* python_format(std::string_view data, const std::string& where) {
    const auto ends_with = [&](std::string_view tail) {
        return where.size() >= tail.size() && where.compare(where.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (data.substr(0, 8) == std::string_view("\x89HDF\r\n\x1a\n", 8)) return "an HDF5 file (a Keras model)";
    if (data.substr(0, 4) == std::string_view("PK\x03\x04", 4)) return "a zip archive (a .keras model)";
    if (ends_with(".onnx")) return "an ONNX file";
    return nullptr;
}

// The file the model would be saved as: `where` with its extension made .lenet.
std::string lenet_name_for(const std::string& where) {
    const size_t slash = where.find_last_of('/'), dot = where.find_last_of('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash) && dot > 0;
    return (has_ext ? where.substr(0, dot) : where) + ".lenet";
}

ModelFile parse(std::string_view data, const std::string& where, Mode mode) {
    Reader r(data, where, mode);
    if (!is_model_file(data)) {
        // A model Python reads, given to C++: what to run to get the file C++ reads.
        if (const char* format = python_format(data, where); format && mode != Mode::check)
            throw ModelFileError(where + ": " + format +
                                 ", not a lenet model file: the C++ API reads lenet's own format (.lenet), which "
                                 "Python writes from any model it loads: lenet-cli --weights " +
                                 where + " --save " + lenet_name_for(where));
        if (data.size() < 8) r.fail("truncated: " + number_str(data.size()) + " bytes, shorter than the header");
        r.fail("no lenet model file header (the file does not start with \"LENETMDL\")");
    }
    r.bytes(8, "the magic");
    ModelFile m;
    m.version = r.le<uint32_t>("the version");
    if (m.version >= kModelFileChecksumSince) {  // every version from 3 on ends in its checksum
        r.need(8 + 4, "the end marker and the checksum");
        const uint32_t recorded = le32(data, data.size() - 4),
                       computed = crc32_update(0, data.substr(0, data.size() - 4));
        if (recorded != computed)
            throw ModelFileError(where + ": damaged: its checksum does not match its bytes (CRC-32 " + hex32(computed) +
                                 ", the file records " + hex32(recorded) +
                                 "): it changed after it was written, or was cut short; save the model again");
        r.stop_at(data.size() - 4);
    }
    if (m.version == 0 || m.version > kModelFileVersion)
        r.fail("format version " + number_str(m.version) + "; this lenet reads versions 1 to " +
               number_str(kModelFileVersion) + " (a file of a newer lenet?)");
    m.input_scale = r.le<double>("the input scale");
    if (m.version >= 2) {
        const auto n = r.le<uint32_t>("the normalization's channel count");
        if (n < (m.version == 2 ? 1 : 0) || n > kMaxNormalized)
            r.fail("a normalization for " + number_str(n) + " channels (" + (m.version == 2 ? "1" : "0") + " to " +
                   number_str(kMaxNormalized) + ")");
        for (auto* values : {&m.mean, &m.std_dev})
            for (uint32_t c = 0; c < n; ++c)
                values->push_back(
                    r.le<double>(values == &m.mean ? "the normalization's mean" : "the normalization's std"));
    }
    if (const auto problem = preparation_problem(m.input_scale, m.mean, m.std_dev); !problem.empty()) r.fail(problem);
    m.name = r.str("the model name");
    m.source = r.str("the source");
    if (m.version >= 3 && file_name(m.source).size() != m.source.size())
        r.fail("the source '" + m.source + "' names folders (a file holds the name of the file it was made from only)");
    m.source = std::string(file_name(m.source));  // earlier versions held the path
    const auto rank = r.count(kMaxRank, "the input rank");
    for (uint32_t i = 0; i < rank; ++i) {
        const auto d = r.le<int64_t>("the input shape");
        if (d < 1 || d > limits::kUnits) r.fail("input dimension " + number_str(d) + " out of range");
        m.input.push_back(d);
    }
    const auto layers = r.count(uint32_t(limits::kLayers), "the layer count");
    int64_t params = 0;
    m.layers.reserve(layers);
    for (uint32_t i = 0; i < layers; ++i) {
        r.layer = int(i);
        m.layers.push_back(read_layer(r, params));
    }
    r.layer = -1;
    if (r.bytes(8, "the end marker") != std::string_view(kEnd, 8)) r.fail("no end marker \"LENETEND\"");
    if (r.left()) r.fail(number_str(r.left()) + " bytes after the end marker");
    return m;
}

// A file descriptor, closed once.
struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    // Closes now, returning what close said (a write's late failure shows here).
    int close() { return ::close(std::exchange(fd, -1)); }
};

}  // namespace

float prepared_pixel(int v, float scale, float mean, float std_dev) {
    // Stored, so that the compiler may not fuse the product into the subtraction: numpy
    // rounds it first.
    volatile float scaled = float(v) * scale;
    return (scaled - mean) / std_dev;
}

std::string preparation_problem(double scale, const std::vector<double>& mean, const std::vector<double>& std_dev) {
    if (!fits_float(scale) || !(float(scale) > 0))
        return "the input scale is " + number_str(scale) + ", not a number above 0 that a float32 holds";
    if (mean.size() != std_dev.size())
        return "a normalization of " + number_str(mean.size()) + " means and " + number_str(std_dev.size()) +
               " stds (one of each per channel)";
    for (size_t c = 0; c < mean.size(); ++c) {
        if (!fits_float(mean[c]))
            return "the normalization's mean of channel " + number_str(c) + " is " + number_str(mean[c]) +
                   ", not a number a float32 holds";
        if (!fits_float(std_dev[c]) || !(float(std_dev[c]) > 0))
            return "the normalization's std of channel " + number_str(c) + " is " + number_str(std_dev[c]) +
                   ", not a number above 0 that a float32 holds";
    }
    for (size_t c = 0; c < std::max<size_t>(mean.size(), 1); ++c) {
        const float m = mean.empty() ? 0.f : float(mean[c]), s = std_dev.empty() ? 1.f : float(std_dev[c]);
        for (int v = 0; v < 256; ++v)
            if (const float x = prepared_pixel(v, float(scale), m, s); !std::isfinite(x))
                return "pixel value " + number_str(v) + " of channel " + number_str(c) + " would become " +
                       number_str(x) + " ((" + number_str(v) + " * " + number_str(float(scale)) + " - " +
                       number_str(m) + ") / " + number_str(s) + " in float32), not a number";
    }
    return "";
}

bool is_model_file(std::string_view head) {
    return head.size() >= 8 && head.substr(0, 8) == std::string_view(kModelFileMagic, 8);
}

ModelFile model_file_parse(std::string_view data, const std::string& where) {
    try {
        return parse(data, where, Mode::read);
    } catch (const ModelFileError&) {
        // Only on failure: is it a file of this version whose header was changed?
        if (header_damaged(data))
            throw ModelFileError(where +
                                 ": damaged: its header was changed after it was written (its checksum holds for the "
                                 "header of a lenet file of version " +
                                 number_str(kModelFileVersion) + "); save the model again");
        throw;
    }
}

ModelFile model_file_read(const std::string& path) {
    // Opened first, then asked what it is (fstat): what is read is what was checked.
    // O_NONBLOCK: a FIFO opens without waiting for a writer, and is then refused.
    // The words of Python's loader for the same cases (lenet/keras/__init__.py, _check_file).
    const int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (opened < 0) {
        if (errno == ENOENT) throw ModelFileError(path + ": no such file");
        throw ModelFileError(path + ": cannot access the file (open: " + std::strerror(errno) + ")");
    }
    Fd fd(opened);
    struct stat st{};
    if (::fstat(fd.fd, &st) != 0)
        throw ModelFileError(path + ": cannot access the file (fstat: " + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) throw ModelFileError(path + ": is a directory, not a model file");
    if (!S_ISREG(st.st_mode)) throw ModelFileError(path + ": not a regular file");
    if (st.st_size > kMaxFileBytes)
        throw ModelFileError(path + ": " + grouped_str(int64_t(st.st_size)) + " bytes, over the limit of " +
                             grouped_str(kMaxFileBytes) + " for a lenet model file");
    std::string data(size_t(st.st_size), '\0');
    size_t got = 0;
    char extra;
    for (;;) {
        // One byte more than fstat said: a file that grew while read is not the one checked.
        const bool past = got == data.size();
        const ssize_t n = past ? ::read(fd.fd, &extra, 1) : ::read(fd.fd, data.data() + got, data.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw ModelFileError(path + ": cannot read the model file (read: " + std::strerror(errno) + ")");
        if (n == 0 && past) break;
        if (n == 0 || past) throw ModelFileError(path + ": cannot read the model file (it changed while read)");
        got += size_t(n);
    }
    return model_file_parse(data, path);
}

std::string model_file_bytes(const ModelFile& m, const std::string& where) {
    Writer w{where, {}};
    w.raw(kModelFileMagic, 8);
    w.le<uint32_t>(kModelFileVersion);
    w.le<double>(m.input_scale);
    if (m.mean.size() != m.std_dev.size())  // the format holds pairs
        throw ModelFileError(
            where + ": cannot be written as a .lenet file: " + preparation_problem(m.input_scale, m.mean, m.std_dev));
    w.count(m.mean.size(), "the normalization");
    for (double v : m.mean) w.le<double>(v);
    for (double v : m.std_dev) w.le<double>(v);
    w.str(m.name, "the model name");
    w.str(file_name(m.source), "the source");
    w.count(m.input.size(), "the input rank");
    for (auto d : m.input) w.le<int64_t>(d);
    w.count(m.layers.size(), "the layer count");
    const LayerSpec defaults;
    for (const auto& l : m.layers) {
        uint32_t fields = 0;
#define LENET_COUNT_FIELD(type, f, init, doc) fields += !(l.f == defaults.f);
        LENET_LAYER_FIELDS(LENET_COUNT_FIELD)
#undef LENET_COUNT_FIELD
        w.le<uint32_t>(fields);
#define LENET_WRITE_FIELD(type, f, init, doc) \
    if (!(l.f == defaults.f)) {               \
        w.str(#f, "a field name");            \
        w.field(l.f);                         \
    }
        LENET_LAYER_FIELDS(LENET_WRITE_FIELD)
#undef LENET_WRITE_FIELD
        w.count(l.weights.size(), "the weight count");
        for (const auto& [name, t] : l.weights) {
            w.str(name, "a weight name");
            w.count(t.shape.size(), "a weight's rank");
            size_t n = 1;
            for (auto d : t.shape) {
                w.le<int64_t>(d);
                n *= d >= 0 ? size_t(d) : 0;
            }
            if (n != t.data.size())  // the reader would take other bytes for its values
                throw ModelFileError(where + ": cannot be written as a .lenet file: weight '" + name + "' of '" +
                                     l.name + "' holds " + number_str(t.data.size()) + " values for its shape " +
                                     tuple_str(t.shape));
            w.raw(t.data.data(), t.data.size() * sizeof(float));
        }
    }
    w.raw(kEnd, 8);
    w.le<uint32_t>(crc32_update(0, w.out));
    parse(w.out, where, Mode::check);  // what the reader refuses is never written
    return std::move(w.out);
}

void model_file_write(const std::string& path, const ModelFile& m) {
    const std::string data = model_file_bytes(m, path);
    const auto cut = path.find_last_of('/');
    const std::string folder = cut == std::string::npos ? "." : path.substr(0, cut + 1);
    // A new file of a name no one can guess, created exclusively (O_EXCL: never a file or
    // a link planted there), so that saves running at once each write their own.
    std::string tmp;
    int opened = -1;
    std::random_device random;
    for (int attempt = 0; opened < 0; ++attempt) {
        tmp = (cut == std::string::npos ? "" : folder) + "." + std::string(file_name(path)) + "." +
              hex32(random()).substr(2) + hex32(random()).substr(2) + ".tmp";
        opened = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (opened < 0 && (errno != EEXIST || attempt == 16))
            throw Error(path + ": cannot write the model file (open: " + std::strerror(errno) + ")");
    }
    Fd fd(opened);
    auto fail = [&](const char* call) {
        const std::string why = std::strerror(errno);
        fd.close();
        ::unlink(tmp.c_str());
        throw Error(path + ": cannot write the model file (" + call + ": " + why + ")");
    };
    for (size_t done = 0; done < data.size();) {
        const ssize_t n = ::write(fd.fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += size_t(n);
    }
    // On the disk before it takes the name: a crash leaves the old file or the new one.
    if (::fsync(fd.fd) != 0) fail("fsync");
    if (fd.close() != 0) {
        const std::string why = std::strerror(errno);
        ::unlink(tmp.c_str());
        throw Error(path + ": cannot write the model file (close: " + why + ")");
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        ::unlink(tmp.c_str());
        throw Error(path + ": cannot write the model file (rename: " + why + ")");
    }
    // The new name on the disk too. A folder that cannot be flushed (EINVAL: some file
    // systems) keeps the file as written.
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        const int synced = ::fsync(dir);
        const int why = errno;
        ::close(dir);
        if (synced != 0 && why != EINVAL)
            throw Error(path + ": the model file is written, but its folder could not be flushed to the disk (fsync: " +
                        std::strerror(why) + ")");
    }
}

}  // namespace lenet
