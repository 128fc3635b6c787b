// The fused path's planner and its host emulation (fused_program.h). No device call.
#include "fused_program.h"

#include <algorithm>
#include <cmath>

#include "../../support/errors.h"
#include "../../support/format.h"

namespace lenet::cuda::fused {

const char* to_string(Code c) {
    switch (c) {
        case Code::conv: return "conv";
        case Code::max_pool: return "max_pool";
        case Code::avg_pool: return "avg_pool";
        case Code::dense: return "dense";
        case Code::activation: return "activation";
        case Code::affine: return "affine";
        case Code::softmax: return "softmax";
    }
    return "?";
}

namespace {

std::string step_name(const std::vector<Step>& steps, size_t i) {
    return "step " + std::to_string(i) + " (" + to_string(steps[i].op) +
           (steps[i].layers.empty() ? "" : ", " + steps[i].layers) + ")";
}

// The op of one step (its constants unset), or a reason in *why.
bool make_op(const Step& s, Op& op, std::string* why) {
    op.in_c = s.in.c, op.in_h = s.in.h, op.in_w = s.in.w;
    op.out_c = s.out.c, op.out_h = s.out.h, op.out_w = s.out.w;
    op.kh = s.kh, op.kw = s.kw, op.sh = s.sh, op.sw = s.sw, op.dh = s.dh, op.dw = s.dw;
    op.pad_top = s.pad.top, op.pad_left = s.pad.left;
    op.act = s.act;
    switch (s.op) {
        case OpKind::conv2d:
            if (s.groups != 1) {
                *why = "grouped or depthwise convolution";
                return false;
            }
            op.code = Code::conv;
            return true;
        case OpKind::max_pool2d: op.code = Code::max_pool; return true;
        case OpKind::avg_pool2d: op.code = Code::avg_pool; return true;
        case OpKind::dense: op.code = Code::dense; return true;
        case OpKind::activation: op.code = Code::activation; return true;
        case OpKind::affine: op.code = Code::affine; return true;
        case OpKind::softmax:
            if (s.in.h * s.in.w != 1) {
                *why = "a softmax over the channels of an image";
                return false;
            }
            op.code = Code::softmax;
            op.log = s.log;
            return true;
        default: *why = std::string("no fused form of ") + to_string(s.op); return false;
    }
}

// Conv weights (and biases) up to this many floats (64 KiB) are staged in shared memory.
constexpr int64_t kMaxStagedFloats = 16 * 1024;

int64_t step_macs(const Step& s) {
    if (s.op == OpKind::conv2d) return s.out.size() * s.kh * s.kw * (s.in.c / std::max(1, s.groups));
    if (s.op == OpKind::dense) return s.in.size() * s.out.c;
    return 0;
}

}  // namespace

namespace {

Program plan_program(const std::vector<Step>& steps, int capacity, int min_blocks, const Limits& limits,
                     bool fuse_pools, std::string* why) {
    Program p;
    if (steps.empty()) {
        *why = "an empty network";
        return p;
    }
    int64_t macs = 0, weight_bytes = 0;
    std::vector<Op> ops;
    std::vector<int64_t> sizes;  // floats per image each op writes
    for (size_t i = 0; i < steps.size(); ++i) {
        const Step& s = steps[i];
        if (s.inputs != std::vector<int>{int(i) - 1}) {
            *why = step_name(steps, i) + " does not read the step before it: only a chain of layers is fused";
            return p;
        }
        macs += step_macs(s);
        weight_bytes += int64_t(s.weights.size() + s.bias.size() + s.scale.size() + s.shift.size()) * 4;
        // A max pooling right after a convolution pools the conv's positions as they are computed.
        if (fuse_pools && s.op == OpKind::max_pool2d && !ops.empty() && ops.back().code == Code::conv &&
            ops.back().pool_kh == 0) {
            Op& conv = ops.back();
            conv.pool_kh = s.kh, conv.pool_kw = s.kw, conv.pool_sh = s.sh, conv.pool_sw = s.sw;
            conv.pool_top = s.pad.top, conv.pool_left = s.pad.left;
            conv.conv_h = conv.out_h, conv.conv_w = conv.out_w;
            conv.out_c = s.out.c, conv.out_h = s.out.h, conv.out_w = s.out.w;
            sizes.back() = s.out.size();
            continue;
        }
        Op op;
        std::string reason;
        if (!make_op(s, op, &reason)) {
            *why = step_name(steps, i) + ": " + reason;
            return p;
        }
        op.step = int(i);
        ops.push_back(op);
        sizes.push_back(s.out.size());
    }
    if (macs > limits.max_macs) {
        *why = grouped_str(macs) + " multiply-adds per image (more than " + grouped_str(limits.max_macs) +
               "): one block per image would be slower than cuDNN and cuBLAS over the whole GPU";
        return p;
    }
    if (weight_bytes > limits.max_weight_bytes) {
        *why = grouped_str(weight_bytes) + " bytes of weights (more than " + grouped_str(limits.max_weight_bytes) +
               "): every block would read them again";
        return p;
    }

    // Ping-pong regions: the input and the outputs of ops 1, 3, ... in region 0;
    // the outputs of ops 0, 2, ... in region 1; then the dense partial sums. After
    // the tile's regions, one region for the conv weights staged in shared memory.
    int64_t region[2] = {steps.front().in.size(), 0};
    for (size_t k = 0; k < ops.size(); ++k) region[(k + 1) % 2] = std::max(region[(k + 1) % 2], sizes[k]);
    int64_t staged = 0;
    for (const Op& op : ops)
        if (op.code == Code::conv && op.weight_count() + op.out_c <= kMaxStagedFloats)
            staged = std::max<int64_t>(staged, op.weight_count() + op.out_c);
    // Dense partial sums: enough to keep a block's threads busy, each over 16 rows or more.
    auto splits_of = [&](const Op& op, int threads) {
        const int64_t rows = int64_t(op.in_c) * op.in_h * op.in_w, units = op.out_c;
        return int(std::max<int64_t>(1, std::min<int64_t>(threads / units, rows / 16)));
    };
    auto scratch_of = [&](int threads) {
        int64_t most = 0;
        for (const Op& op : ops)
            if (op.code == Code::dense && splits_of(op, threads) > 1)
                most = std::max<int64_t>(most, int64_t(op.out_c) * splits_of(op, threads));
        return most;
    };
    // The tile: up to 8 images a block while the grid keeps min_blocks blocks; one image
    // (and 1024 threads to share its work) below that.
    int ipb = 1;
    for (int candidate : {8, 4, 2}) {
        const int64_t blocks = (capacity + candidate - 1) / candidate;
        const int64_t floats = (region[0] + region[1] + scratch_of(256)) * candidate + staged;
        if (blocks >= min_blocks && floats * 4 <= limits.shared_bytes) {
            ipb = candidate;
            break;
        }
    }
    const int threads = ipb == 1 ? 1024 : 256;
    const int64_t per_image = region[0] + region[1] + scratch_of(threads);
    if ((per_image * ipb + staged) * 4 > limits.shared_bytes) {
        *why = "its activations need " + grouped_str(per_image * 4) +
               " bytes of shared memory per image (the GPU has " + grouped_str(limits.shared_bytes) + " per block)";
        return p;
    }

    const int r0 = 0, r1 = int(region[0] * ipb), sc = int((region[0] + region[1]) * ipb);
    const int weights_at = int(per_image * ipb);
    for (size_t k = 0; k < ops.size(); ++k) {
        Op& op = ops[k];
        const bool from0 = k % 2 == 0;
        op.in_base = from0 ? r0 : r1, op.in_stride = int(from0 ? region[0] : region[1]);
        op.out_base = from0 ? r1 : r0, op.out_stride = int(from0 ? region[1] : region[0]);
        op.splits = op.code == Code::dense ? splits_of(op, threads) : 1;
        op.scratch_base = sc;
        if (op.code == Code::conv && op.weight_count() + op.out_c <= kMaxStagedFloats) op.staged = weights_at;
        if (limits.column_blocks && ipb == 1 && op.code == Code::conv && op.pool_kh == 0 && op.sh == 1 && op.dh == 1 &&
            op.kh == op.kw && (op.kw == 3 || op.kw == 5))
            op.column_block = kColumnBlock;
    }
    p.ops = std::move(ops);
    p.threads = threads;
    p.shared_floats = int(per_image * ipb + staged);
    p.tile.images = ipb;
    p.tile.input_size = int(steps.front().in.size());
    p.tile.output_size = int(steps.back().out.size());
    p.tile.input_base = r0, p.tile.input_stride = int(region[0]);
    p.tile.output_base = p.ops.back().out_base, p.tile.output_stride = p.ops.back().out_stride;
    why->clear();
    return p;
}

}  // namespace

Program fused_plan(const std::vector<Step>& steps, int capacity, int min_blocks, const Limits& limits,
                   std::string* why) {
    Program p = plan_program(steps, capacity, min_blocks, limits, true, why);
    if (!p.ops.empty() && p.tile.images == 1) {
        // One image a block (small batches): latency, not arithmetic, bounds it. Pooling
        // as its own op makes every conv position a thread's work: 4x the threads busy
        // on a 2x2 pool, each sum a quarter as long.
        std::string unused;
        Program apart = plan_program(steps, capacity, min_blocks, limits, false, &unused);
        if (!apart.ops.empty()) return apart;
    }
    return p;
}

std::string Program::summary() const {
    std::string s;
    for (const Op& op : ops) {
        if (!s.empty()) s += ", ";
        s += to_string(op.code);
        if (op.code == Code::conv && op.pool_kh) s += "+max_pool";
        if (op.column_block) s += " (columns of " + std::to_string(op.column_block) + ")";
        if (op.code != Code::softmax && op.code != Code::activation && op.code != Code::affine) {
            s += " " + std::to_string(op.out_c);
            if (op.out_h * op.out_w > 1) s += "x" + std::to_string(op.out_h) + "x" + std::to_string(op.out_w);
        }
    }
    return s + "; " + std::to_string(tile.images) + (tile.images == 1 ? " image" : " images") + " x " +
           std::to_string(threads) + " threads a block, " + grouped_str(int64_t(shared_floats) * 4) +
           " bytes of shared memory";
}

namespace {

template <int IPB>
void emulate_tiles(const Program& p, const float* values, const uint8_t* pixels, float scale, float* y, int n,
                   const Completion& done) {
    std::vector<float> smem(size_t(p.shared_floats));
    const Tile& t = p.tile;
    const unsigned blocks = unsigned((n + IPB - 1) / IPB);
    for (int first = 0; first < n; first += IPB) {
        const int count = std::min(IPB, n - first);
        std::fill(smem.begin(), smem.end(), std::nanf(""));  // nothing may read what no phase wrote
        for (int tid = 0; tid < p.threads; ++tid)
            load_tile(t, values ? values + int64_t(first) * t.input_size : nullptr,
                      pixels ? pixels + int64_t(first) * t.input_size : nullptr, scale, count, smem.data(), tid,
                      p.threads);
        for (const Op& op : p.ops)
            for (int phase = 0; phase < op.phases(); ++phase)
                for (int tid = 0; tid < p.threads; ++tid) run_phase<IPB>(op, phase, smem.data(), tid, p.threads);
        for (int tid = 0; tid < p.threads; ++tid)
            store_tile(t, smem.data(), y + int64_t(first) * t.output_size, count, tid, p.threads);
        if (done.flag) block_done(done, blocks);
    }
}

}  // namespace

void emulate(const Program& p, const float* values, const uint8_t* pixels, float scale, float* y, int n,
             const Completion& done) {
    switch (p.tile.images) {
        case 1: return emulate_tiles<1>(p, values, pixels, scale, y, n, done);
        case 2: return emulate_tiles<2>(p, values, pixels, scale, y, n, done);
        case 4: return emulate_tiles<4>(p, values, pixels, scale, y, n, done);
        case 8: return emulate_tiles<8>(p, values, pixels, scale, y, n, done);
    }
    throw InputError("fused program: " + std::to_string(p.tile.images) + " images a block is not 1, 2, 4 or 8");
}

}  // namespace lenet::cuda::fused
