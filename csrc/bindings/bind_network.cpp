// LayerSpec (the layer record, generated from LENET_LAYER_FIELDS), Network, and what
// the layer table answers without weights.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <tuple>

#include "../net/layer_table.h"
#include "../net/limits.h"
#include "../net/model_file.h"
#include "../net/network.h"
#include "bindings.h"

namespace lenet::bindings {
namespace {

Tensor to_tensor(const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
    Tensor t;
    t.shape.assign(a.shape(), a.shape() + a.ndim());
    t.data.assign(a.data(), a.data() + a.size());
    return t;
}

py::tuple to_tuple(const std::vector<int64_t>& v) {
    py::tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
    return t;
}

const char* output_kind(OutputKind k) {
    switch (k) {
        case OutputKind::softmax: return "softmax";
        case OutputKind::log_softmax: return "log_softmax";
        case OutputKind::sigmoid: return "sigmoid";
        case OutputKind::scores: return "scores";
    }
    return "?";
}

// The Python type of each record field, for fields() (and the stub check).
template <class T>
const char* py_type();
template <>
const char* py_type<std::string>() {
    return "str";
}
template <>
const char* py_type<int>() {
    return "int";
}
template <>
const char* py_type<float>() {
    return "float";
}
template <>
const char* py_type<bool>() {
    return "bool";
}
template <>
const char* py_type<std::vector<int>>() {
    return "list[int]";
}
template <>
const char* py_type<Int2>() {
    return "tuple[int, int]";
}
template <>
const char* py_type<Int4>() {
    return "tuple[int, int, int, int]";
}

}  // namespace

void bind_network(py::module_& m) {
    auto spec = py::class_<LayerSpec>(m, "LayerSpec", "One layer as the loader describes it (csrc/net/layer.h).");
    spec.def(py::init<>());
#define LENET_BIND_FIELD(type, field, init, doc) spec.def_readwrite(#field, &LayerSpec::field, doc);
    LENET_LAYER_FIELDS(LENET_BIND_FIELD)
#undef LENET_BIND_FIELD
    spec.def(
            "set_weight",
            [](LayerSpec& l, const std::string& name,
               const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
                l.set_weight(name, to_tensor(a));
            },
            py::arg("name"), py::arg("array"), "Sets (or replaces) the weight `name`, in Keras layout.")
        .def("weight_names",
             [](const LayerSpec& l) {
                 std::vector<std::string> names;
                 for (const auto& w : l.weights) names.push_back(w.first);
                 return names;
             })
        .def(
            "weight",
            [](const LayerSpec& l, const std::string& name) -> py::object {
                const Tensor* t = l.weight(name);
                if (!t) return py::none();
                py::array_t<float> a(std::vector<py::ssize_t>(t->shape.begin(), t->shape.end()));
                std::copy(t->data.begin(), t->data.end(), a.mutable_data());
                return std::move(a);
            },
            py::arg("name"), "A copy of the weight `name`, or None.")
        .def("__repr__",
             [](const LayerSpec& l) { return "LayerSpec(" + l.kind + ", '" + l.name + "', " + l.keras_class + ")"; })
        .def_static(
            "fields",
            [] {
                std::vector<std::tuple<std::string, std::string, std::string>> out;
#define LENET_FIELD_INFO(type, field, init, doc) out.emplace_back(#field, py_type<type>(), doc);
                LENET_LAYER_FIELDS(LENET_FIELD_INFO)
#undef LENET_FIELD_INFO
                return out;
            },
            "(name, Python type, meaning) of every field, in declaration order.");

    py::class_<Network, std::shared_ptr<Network>>(m, "Network")
        .def(py::init([](const std::vector<LayerSpec>& layers, const std::vector<int64_t>& input, std::string source) {
                 return std::make_shared<Network>(layers, input, std::move(source));
             }),
             py::arg("layers"), py::arg("input_shape"), py::arg("source"),
             "Checks and lowers the layers; input_shape: Keras' per-sample input shape.")
        .def_property_readonly(
            "input_shape", [](const Network& n) { return to_tuple(n.input().keras()); },
            "Keras' per-sample input shape.")
        .def_property_readonly(
            "output_shape", [](const Network& n) { return to_tuple(n.output().keras()); },
            "Keras' per-sample output shape.")
        .def_property_readonly("output_size", &Network::output_size)
        .def_property_readonly(
            "output_kind", [](const Network& n) { return output_kind(n.output_kind()); },
            "'softmax', 'sigmoid' or 'scores': what the outputs are.")
        .def_property_readonly("channels_first", &Network::channels_first)
        .def_property_readonly(
            "image_shape",
            [](const Network& n) -> py::object {
                const ImageShape& i = n.image();
                if (!i.channels) return py::none();
                return py::make_tuple(i.height, i.width, i.channels);
            },
            "(height, width, channels) of the image the input holds (Network::image), None for none.")
        .def_property_readonly("params", &Network::params)
        .def_property_readonly("macs", &Network::macs, "Multiply-adds per image (convolutions, dense layers).")
        .def(
            "layers",
            [](const Network& n) {
                py::list rows;
                for (const auto& l : n.summary())
                    rows.append(py::make_tuple(l.name, l.keras_class, to_tuple(l.out.keras()), l.params));
                return rows;
            },
            "One (name, keras_class, output_shape, params) per layer of the file.")
        .def(
            "steps",
            [](const Network& n) {
                py::list rows;
                for (const auto& s : n.steps())
                    rows.append(py::make_tuple(to_string(s.op), s.layers, s.act.str(),
                                               py::make_tuple(s.out.h, s.out.w, s.out.c)));
                return rows;
            },
            "One (op, keras_layers, activation, output_hwc) per executed step, after folding and fusion.");

    m.def(
        "expected_weights",
        [](const std::vector<LayerSpec>& layers, const std::vector<int64_t>& input, const std::string& source) {
            py::list out;
            for (const auto& slots : Network::expected_weights(layers, input, source)) {
                py::list row;
                for (const auto& s : slots)
                    row.append(py::make_tuple(s.name, to_tuple(s.shape), s.count_only, s.ignored));
                out.append(row);
            }
            return out;
        },
        py::arg("layers"), py::arg("input_shape"), py::arg("source"),
        "Per layer, the weights it expects: (name, Keras shape, count_only, ignored). Checks the graph and the "
        "shapes as Network does, without weights.");
    // lenet's own model file (csrc/net/model_file.h): what the C++ API loads.
    m.def(
        "read_model_file",
        [](const std::string& path) {
            ModelFile f;
            {
                py::gil_scoped_release release;
                f = model_file_read(path);
            }
            return py::make_tuple(std::move(f.layers), to_tuple(f.input), f.input_scale, py::tuple(py::cast(f.mean)),
                                  py::tuple(py::cast(f.std_dev)), f.name, f.source, f.version);
        },
        py::arg("path"),
        "Reads a .lenet file: (layers, input_shape, input_scale, mean, std, name, source, version); mean and std are "
        "empty for a model that is not normalized; source is the name of the file it was made from; versions 1 and "
        "2 carry no checksum. ModelFileError naming the file and what is wrong.");
    m.def(
        "write_model_file",
        [](const std::string& path, std::vector<LayerSpec> layers, const std::vector<int64_t>& input, double scale,
           const std::string& name, const std::string& source, std::vector<double> mean, std::vector<double> std_dev) {
            ModelFile f{std::move(layers), input, scale, std::move(mean), std::move(std_dev), name, source};
            py::gil_scoped_release release;
            model_file_write(path, f);
        },
        py::arg("path"), py::arg("layers"), py::arg("input_shape"), py::arg("input_scale"), py::arg("name"),
        py::arg("source"), py::arg("mean") = std::vector<double>{}, py::arg("std") = std::vector<double>{},
        "Writes a .lenet file (to a new temporary file beside it, flushed, then renamed); mean and std (per channel, "
        "or one for every channel) where the model's pixels are normalized. ModelFileError for anything the reader "
        "would refuse, before a file is made; Error naming the failing call.");
    m.def("preparation_problem", &preparation_problem, py::arg("scale"), py::arg("mean"), py::arg("std"),
          "What is wrong with a preparation of pixels (scale, then mean and std per channel) as the float32s the "
          "engine uses; '' when nothing is. The .lenet reader's check.");
    m.def(
        "is_model_file", [](const py::bytes& head) { return is_model_file(std::string_view(head)); }, py::arg("head"),
        "Whether a file's first bytes are a .lenet file's.");
    m.def("layer_kinds", &layer_kinds, "Every layer kind the network knows.");
    m.def(
        "activations",
        [] {
            std::vector<std::string> names;
#define LENET_ACT_NAME(n, monotonic) names.push_back(#n);
            LENET_ACTIVATIONS(LENET_ACT_NAME)
#undef LENET_ACT_NAME
            names.push_back("softmax");
            names.push_back("log_softmax");
            return names;
        },
        "Every activation the network knows.");
    m.def(
        "activation_monotonic",
        [](const std::string& name, float alpha) {
            Activation a;
            a.alpha = alpha;
            bool found = false;
#define LENET_ACT_KIND(n, monotonic) \
    if (name == #n) a.kind = Act::n, found = true;
            LENET_ACTIVATIONS(LENET_ACT_KIND)
#undef LENET_ACT_KIND
            if (!found) throw py::value_error("no element-wise activation '" + name + "'");
            return a.monotonic();
        },
        py::arg("name"), py::arg("alpha") = 0.f,
        "Whether the element-wise activation, with this alpha, never decreases (LENET_ACTIVATIONS' column): "
        "the fused conv + max pool relies on it.");
    m.def(
        "limits",
        [] {
            py::dict d;
            d["layers"] = limits::kLayers;
            d["inputs"] = limits::kInputs;
            d["kernel"] = limits::kKernel;
            d["stride"] = limits::kStride;
            d["dilation"] = limits::kDilation;
            d["pad"] = limits::kPad;
            d["dim"] = limits::kDim;
            d["channels"] = limits::kChannels;
            d["units"] = limits::kUnits;
            d["params"] = limits::kParams;
            d["activation"] = limits::kActivation;
            return d;
        },
        "The bounds of what the engine accepts (csrc/net/limits.h).");
}

}  // namespace lenet::bindings
