// The .lenet file format (model_file.h): a writer and a bounded reader.
#include "model_file.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>

#include <sys/stat.h>

#include "../support/errors.h"
#include "../support/format.h"
#include "limits.h"

namespace lenet {
namespace {

// Bounds of the format itself (the model's are limits.h's).
constexpr uint32_t kMaxString = 1 << 16;  // names, activations, sources: far above any real one
constexpr uint32_t kMaxFields = 256;      // per layer; the record has about 30
constexpr uint32_t kMaxList = limits::kInputs;  // inputs of a merge; axes, shapes are shorter
constexpr uint32_t kMaxWeights = 64;      // per layer; a layer has at most a handful
constexpr uint32_t kMaxRank = 8;          // of a weight or the input
// The largest file: every parameter as a float plus its records.
constexpr int64_t kMaxFileBytes = limits::kParams * 4 + (int64_t(64) << 20);
constexpr char kEnd[9] = "LENETEND";

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the format's numbers are written as the host holds them");

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
    std::string out;
    void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
    template <class T>
    void le(T v) {  // the host is little-endian (asserted above): bytes as they are
        static_assert(std::is_arithmetic_v<T>);
        raw(&v, sizeof v);
    }
    void str(const std::string& s) {
        le<uint32_t>(uint32_t(s.size()));
        raw(s.data(), s.size());
    }
    void list(const int* v, size_t n) {
        le<uint8_t>(t_list);
        le<uint32_t>(uint32_t(n));
        for (size_t i = 0; i < n; ++i) le<int32_t>(v[i]);
    }
    void field(const std::string& v) {
        le<uint8_t>(t_str);
        str(v);
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

class Reader {
public:
    Reader(std::string_view data, const std::string& where) : data_(data), where_(where) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw ModelFileError(where_ + ": " + what + " (at byte " + number_str(pos_) + " of " +
                             number_str(data_.size()) + "; not a lenet model file, or a damaged one)");
    }
    size_t left() const { return data_.size() - pos_; }
    void need(uint64_t n, const std::string& what) const {
        if (n > left())
            fail("truncated: " + what + " needs " + number_str(n) + " bytes, " + number_str(left()) + " left");
    }
    std::string_view bytes(size_t n, const std::string& what) {
        need(n, what);
        auto v = data_.substr(pos_, n);
        pos_ += n;
        return v;
    }
    template <class T>
    T le(const std::string& what) {
        T v;
        std::memcpy(&v, bytes(sizeof v, what).data(), sizeof v);
        return v;
    }
    uint32_t count(uint32_t most, const std::string& what) {
        const auto n = le<uint32_t>(what);
        if (n > most) fail(what + ": " + number_str(n) + " is over the limit of " + number_str(most));
        return n;
    }
    // Text is UTF-8 (Python reads it as str): anything else is damage.
    std::string str(const std::string& what) {
        std::string s(bytes(count(kMaxString, what + " length"), what));
        if (!valid_utf8(s)) fail(what + " is not UTF-8 text");
        return s;
    }
    uint8_t type(Type want, const std::string& field) {
        const auto t = le<uint8_t>(layer + "the type of field '" + field + "'");
        if (t != want)
            fail(layer + "field '" + field + "' has type " + number_str(int(t)) + ", expected " +
                 number_str(int(want)));
        return t;
    }
    std::vector<int> list(const std::string& field, uint32_t exact = 0) {
        type(t_list, field);
        const auto n = count(kMaxList, layer + "the length of field '" + field + "'");
        if (exact && n != exact)
            fail(layer + "field '" + field + "' has " + number_str(n) + " values, expected " + number_str(exact));
        need(uint64_t(n) * 4, layer + "field '" + field + "'");
        std::vector<int> v(n);
        for (auto& x : v) x = le<int32_t>(field);
        return v;
    }
    void field(const std::string& f, std::string& v) {
        type(t_str, f);
        v = str(layer + "field '" + f + "'");
    }
    void field(const std::string& f, int& v) {
        type(t_int, f);
        v = le<int32_t>(f);
    }
    void field(const std::string& f, float& v) {
        type(t_float, f);
        v = le<float>(f);
    }
    void field(const std::string& f, bool& v) {
        type(t_bool, f);
        const auto b = le<uint8_t>(f);
        if (b > 1) fail(layer + "field '" + f + "' is a bool of value " + number_str(int(b)));
        v = b == 1;
    }
    void field(const std::string& f, std::vector<int>& v) { v = list(f); }
    void field(const std::string& f, Int2& v) {
        auto l = list(f, 2);
        v = {l[0], l[1]};
    }
    void field(const std::string& f, Int4& v) {
        auto l = list(f, 4);
        v = {l[0], l[1], l[2], l[3]};
    }

    std::string layer;  // "layer 3 ('conv2'): " while a layer's fields are read, for messages

private:
    std::string_view data_;
    const std::string& where_;
    size_t pos_ = 0;
};

LayerSpec read_layer(Reader& r, int index, int64_t& params) {
    LayerSpec l;
    const std::string at = "layer " + number_str(index);
    const auto fields = r.count(kMaxFields, at + ": the field count");
    for (uint32_t i = 0; i < fields; ++i) {
        const auto name = r.str(at + ": a field name");
        bool known = false;
#define LENET_READ_FIELD(type, f, init, doc)    \
    if (!known && name == #f) {                 \
        r.layer = at + " ('" + l.name + "'): "; \
        r.field(#f, l.f);                       \
        known = true;                           \
    }
        LENET_LAYER_FIELDS(LENET_READ_FIELD)
#undef LENET_READ_FIELD
        if (!known) r.fail(at + ": unknown field '" + name + "' (a file of a newer lenet?)");
    }
    r.layer.clear();
    const std::string who = at + " ('" + l.name + "')";
    const auto weights = r.count(kMaxWeights, who + ": the weight count");
    for (uint32_t i = 0; i < weights; ++i) {
        auto name = r.str(who + ": a weight name");
        const std::string w = who + ", weight '" + name + "'";
        if (l.weight(name)) r.fail(w + " appears twice");
        Tensor t;
        const auto rank = r.count(kMaxRank, w + ": the rank");
        int64_t n = 1;
        for (uint32_t d = 0; d < rank; ++d) {
            const auto dim = r.le<int64_t>(w + ": a dimension");
            if (dim < 0 || dim > limits::kParams) r.fail(w + ": dimension " + number_str(dim) + " out of range");
            n *= dim;
            if (n > limits::kParams) break;  // checked below; never overflows
            t.shape.push_back(dim);
        }
        params += n;
        if (n > limits::kParams || params > limits::kParams)
            r.fail(w + ": the model would hold over " + grouped_str(limits::kParams) + " parameters");
        r.need(uint64_t(n) * 4, w + " (" + grouped_str(n) + " floats)");
        t.data.resize(size_t(n));
        std::memcpy(t.data.data(), r.bytes(size_t(n) * 4, w).data(), size_t(n) * 4);
        l.set_weight(name, std::move(t));
    }
    return l;
}

}  // namespace

bool is_model_file(std::string_view head) {
    return head.size() >= 8 && head.substr(0, 8) == std::string_view(kModelFileMagic, 8);
}

ModelFile model_file_parse(std::string_view data, const std::string& where) {
    Reader r(data, where);
    if (!is_model_file(data)) {
        if (data.size() < 8) r.fail("truncated: " + number_str(data.size()) + " bytes, shorter than the header");
        r.fail("no lenet model file header (the file does not start with \"LENETMDL\")");
    }
    r.bytes(8, "the magic");
    const auto version = r.le<uint32_t>("the version");
    if (version == 0 || version > kModelFileVersion)
        r.fail("format version " + number_str(version) + "; this lenet reads version " + number_str(kModelFileVersion) +
               " (save the model again with this lenet)");
    ModelFile m;
    m.input_scale = r.le<double>("the input scale");
    if (!std::isfinite(m.input_scale)) r.fail("the input scale is not a finite number");
    if (version >= 2) {
        const auto n = r.le<uint32_t>("the normalization's channel count");
        if (n < 1 || n > kMaxNormalized)
            r.fail("a normalization for " + number_str(n) + " channels (1 to " + number_str(kMaxNormalized) + ")");
        for (auto* values : {&m.mean, &m.std_dev}) {
            const bool is_std = values == &m.std_dev;
            for (uint32_t c = 0; c < n; ++c) {
                const auto v = r.le<double>(is_std ? "the normalization's std" : "the normalization's mean");
                if (!std::isfinite(v) || (is_std && !(v > 0)))
                    r.fail(std::string("the normalization's ") + (is_std ? "std" : "mean") + " of channel " +
                           number_str(c) + " is " + number_str(v) +
                           (is_std ? ", not a finite number above 0" : ", not a finite number"));
                values->push_back(v);
            }
        }
    }
    m.name = r.str("the model name");
    m.source = r.str("the source");
    const auto rank = r.count(kMaxRank, "the input rank");
    for (uint32_t i = 0; i < rank; ++i) {
        const auto d = r.le<int64_t>("the input shape");
        if (d < 1 || d > limits::kUnits) r.fail("input dimension " + number_str(d) + " out of range");
        m.input.push_back(d);
    }
    const auto layers = r.count(uint32_t(limits::kLayers), "the layer count");
    int64_t params = 0;
    for (uint32_t i = 0; i < layers; ++i) m.layers.push_back(read_layer(r, int(i), params));
    if (r.bytes(8, "the end marker") != std::string_view(kEnd, 8)) r.fail("no end marker \"LENETEND\"");
    if (r.left()) r.fail(number_str(r.left()) + " bytes after the end marker");
    return m;
}

ModelFile model_file_read(const std::string& path) {
    // The words of Python's loader for the same cases (lenet/keras/__init__.py, _check_file).
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) throw ModelFileError(path + ": no such file");
        throw ModelFileError(path + ": cannot access the file (" + std::strerror(errno) + ")");
    }
    if (S_ISDIR(st.st_mode)) throw ModelFileError(path + ": is a directory, not a model file");
    if (!S_ISREG(st.st_mode)) throw ModelFileError(path + ": not a regular file");
    if (st.st_size > kMaxFileBytes)
        throw ModelFileError(path + ": " + grouped_str(int64_t(st.st_size)) + " bytes, over the limit of " +
                             grouped_str(kMaxFileBytes) + " for a lenet model file");
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw ModelFileError(path + ": cannot access the file (" + std::strerror(errno) + ")");
    std::string data(size_t(st.st_size), '\0');
    if (!data.empty() && std::fread(data.data(), 1, data.size(), f.get()) != data.size())
        throw ModelFileError(path + ": cannot read the model file (it changed while read?)");
    return model_file_parse(data, path);
}

std::string model_file_bytes(const ModelFile& m) {
    Writer w;
    w.raw(kModelFileMagic, 8);
    if (m.mean.size() != m.std_dev.size() || m.mean.size() > kMaxNormalized)
        throw ModelFileError(m.source + ": a normalization of " + number_str(m.mean.size()) + " means and " +
                             number_str(m.std_dev.size()) + " stds cannot be written (1 to " +
                             number_str(kMaxNormalized) + " of each)");
    for (size_t c = 0; c < m.mean.size(); ++c)
        if (!std::isfinite(m.mean[c]) || !std::isfinite(m.std_dev[c]) || !(m.std_dev[c] > 0))
            throw ModelFileError(m.source + ": a normalization with mean " + number_str(m.mean[c]) + " and std " +
                                 number_str(m.std_dev[c]) + " (channel " + number_str(c) +
                                 ") cannot be written: finite numbers, the std above 0");
    const bool normalized = !m.mean.empty();
    w.le<uint32_t>(normalized ? 2 : 1);  // version 1 when it can: older lenets read it
    w.le<double>(m.input_scale);
    if (normalized) {
        w.le<uint32_t>(uint32_t(m.mean.size()));
        for (double v : m.mean) w.le<double>(v);
        for (double v : m.std_dev) w.le<double>(v);
    }
    w.str(m.name);
    w.str(m.source);
    w.le<uint32_t>(uint32_t(m.input.size()));
    for (auto d : m.input) w.le<int64_t>(d);
    w.le<uint32_t>(uint32_t(m.layers.size()));
    const LayerSpec defaults;
    for (const auto& l : m.layers) {
        uint32_t fields = 0;
#define LENET_COUNT_FIELD(type, f, init, doc) fields += !(l.f == defaults.f);
        LENET_LAYER_FIELDS(LENET_COUNT_FIELD)
#undef LENET_COUNT_FIELD
        w.le<uint32_t>(fields);
#define LENET_WRITE_FIELD(type, f, init, doc) \
    if (!(l.f == defaults.f)) {               \
        w.str(#f);                            \
        w.field(l.f);                         \
    }
        LENET_LAYER_FIELDS(LENET_WRITE_FIELD)
#undef LENET_WRITE_FIELD
        w.le<uint32_t>(uint32_t(l.weights.size()));
        for (const auto& [name, t] : l.weights) {
            w.str(name);
            w.le<uint32_t>(uint32_t(t.shape.size()));
            for (auto d : t.shape) w.le<int64_t>(d);
            w.raw(t.data.data(), t.data.size() * sizeof(float));
        }
    }
    w.raw(kEnd, 8);
    return std::move(w.out);
}

void model_file_write(const std::string& path, const ModelFile& m) {
    const std::string data = model_file_bytes(m);
    const std::string tmp = path + ".tmp";
    {
        std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
        if (!f || std::fwrite(data.data(), 1, data.size(), f.get()) != data.size() || std::fflush(f.get()) != 0) {
            const std::string why = std::strerror(errno);
            std::remove(tmp.c_str());
            throw Error(path + ": cannot write the model file (" + why + ")");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(tmp.c_str());
        throw Error(path + ": cannot write the model file (" + why + ")");
    }
}

}  // namespace lenet
