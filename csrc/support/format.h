// Numbers as text, for messages and listings (Activation::str, shapes in errors).
// std::to_chars, never iostreams: no locale, no facets, the same text in any
// process. (iostream formatting of a double once crashed inside a library loaded
// with RTLD_DEEPBIND, whose locale facets were not the process's; see
// backends/cuda/libraries.h for why nothing of ours is loaded that way now.)
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace lenet {

// The shortest text that reads back as the same value: 0.3f -> "0.3", inf -> "inf".
template <class T>
std::string number_str(T v) {
    static_assert(std::is_arithmetic_v<T>, "number_str takes a number");
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

// "(1, 2)", "(3,)": a shape or a list of numbers as Python writes a tuple.
template <class T>
std::string tuple_str(const std::vector<T>& v) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + number_str(v[i]);
    return s + (v.size() == 1 ? ",)" : ")");
}

// 13883904 -> "13,883,904".
inline std::string grouped_str(int64_t v) {
    std::string digits = number_str(v < 0 ? -v : v), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return (v < 0 ? "-" : "") + out;
}

}  // namespace lenet
