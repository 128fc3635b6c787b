// Files read whole without the GIL, and the PNG lane (csrc/io/).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <utility>

#include "../io/dark_ground.h"
#include "../io/gray_png.h"
#include "../io/read_files.h"
#include "bindings.h"

namespace lenet::bindings {
namespace {

// (pixels uint8 (decoded, height, width), rows int64) of a decoded stack; the pixels stay
// in the vector that holds them: the array owns it (no copy).
std::pair<py::array_t<uint8_t>, py::array_t<int64_t>> stack_arrays(GrayStack&& stack) {
    auto* holder = new std::vector<uint8_t>(std::move(stack.pixels));
    py::capsule owner(holder, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
    py::array_t<uint8_t> pixels({py::ssize_t(stack.decoded), py::ssize_t(stack.height), py::ssize_t(stack.width)},
                                holder->data(), owner);
    return {pixels, py::array_t<int64_t>(py::ssize_t(stack.rows.size()), stack.rows.data())};
}

}  // namespace

void bind_io(py::module_& m) {
    m.def(
        "read_files",
        [](const std::vector<std::string>& paths, size_t max_bytes) {
            std::vector<FileRead> files;
            {
                py::gil_scoped_release release;
                files = read_files(paths, max_bytes);
            }
            py::list out(files.size());
            for (size_t i = 0; i < files.size(); ++i)
                out[i] = files[i].error ? py::object(py::int_(files[i].error)) : py::object(py::bytes(files[i].data));
            return out;
        },
        py::arg("paths"), py::arg("max_bytes"),
        "Each file (paths as bytes) read whole, with the GIL released: its bytes, or the errno "
        "that stopped it (EFBIG when larger than max_bytes).");
    m.def(
        "read_gray_images",
        [](const std::vector<std::string>& paths, size_t max_bytes, int height, int width) {
            if (height < 1 || width < 1) throw py::value_error("read_gray_images: height and width must be positive");
            std::unique_ptr<GrayImagesRead> got;
            {
                py::gil_scoped_release release;
                got = std::make_unique<GrayImagesRead>(read_gray_images(paths, max_bytes, height, width));
            }
            py::list files(got->files.size());
            for (size_t i = 0; i < got->files.size(); ++i) {
                const FileRead& f = got->files[i];
                files[i] = f.error                   ? py::object(py::int_(f.error))
                           : got->stack.rows[i] >= 0 ? py::object(py::none())
                                                     : py::object(py::bytes(f.data));
            }
            auto [pixels, rows] = stack_arrays(std::move(got->stack));
            return py::make_tuple(files, pixels, rows);
        },
        py::arg("paths"), py::arg("max_bytes"), py::arg("height"), py::arg("width"),
        "read_files, and each file that is a plain 8-bit grayscale PNG of height x width decoded as it "
        "is read (GIL released): (files, pixels, rows). pixels: uint8 (decoded, height, width); rows[i]: "
        "the row of file i in pixels, or -1; files[i]: None when decoded, else its bytes or errno.");
    m.def(
        "decode_gray_pngs",
        [](const py::list& items, int height, int width) {
            if (height < 1 || width < 1) throw py::value_error("decode_gray_pngs: height and width must be positive");
            // Views into the bytes objects, which `held` keeps alive while the GIL is released.
            std::vector<py::object> held;
            std::vector<std::string_view> data;
            for (const py::handle item : items) {
                held.push_back(py::reinterpret_borrow<py::object>(item));
                data.push_back(PyBytes_Check(item.ptr()) ? std::string_view(PyBytes_AS_STRING(item.ptr()),
                                                                            size_t(PyBytes_GET_SIZE(item.ptr())))
                                                         : std::string_view());
            }
            GrayStack stack(data.size(), height, width);
            {
                py::gil_scoped_release release;
                for (size_t i = 0; i < data.size(); ++i)
                    if (!data[i].empty()) stack.add(i, data[i]);
                stack.finish();
            }
            auto [pixels, rows] = stack_arrays(std::move(stack));
            return py::make_tuple(pixels, rows);
        },
        py::arg("items"), py::arg("height"), py::arg("width"),
        "Each item that is bytes of a plain 8-bit grayscale PNG of height x width, decoded (GIL "
        "released): (pixels, rows). pixels: uint8 (decoded, height, width); rows[i]: the row of item i "
        "in pixels, or -1 for an item left to the general path (any other object, format or form).");
    m.def(
        "dark_ground",
        [](const py::array_t<uint8_t, py::array::c_style>& pixels) {
            if (pixels.ndim() < 3 || pixels.ndim() > 4 || (pixels.ndim() == 4 && pixels.shape(3) != 1) ||
                pixels.shape(1) < 2 || pixels.shape(2) < 2)
                throw py::value_error("dark_ground takes uint8 (n, h, w) or (n, h, w, 1) with h, w >= 2");
            const size_t n = size_t(pixels.shape(0));
            py::array_t<bool> out{py::ssize_t(n)};
            dark_ground(pixels.data(), n, int(pixels.shape(1)), int(pixels.shape(2)), out.mutable_data());
            return out;
        },
        py::arg("pixels"),
        "Per image of a uint8 stack (n, h, w[, 1]): whether the median of its outermost pixels is below "
        "mid-gray (an MNIST-like dark ground).");
    m.attr("png_decoder") = gray_png_decoder();
}

}  // namespace lenet::bindings
