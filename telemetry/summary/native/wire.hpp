// The protobuf wire format, as much of it as telemetry.v1.Summary needs: a bounds-checked reader that accepts
// and rejects what upb (protobuf's Python backend) accepts and rejects, and an appending writer that emits what
// upb's serializer emits (fields in number order, proto3 defaults left out, repeated scalars packed).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire's float64s are read by memcpy");

namespace treemetry {

struct WireError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum WireType : uint32_t { VARINT = 0, FIXED64 = 1, LEN = 2, SGROUP = 3, EGROUP = 4, FIXED32 = 5 };

class Reader {
  public:
    Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

    bool done() const { return p_ >= end_; }
    size_t left() const { return static_cast<size_t>(end_ - p_); }

    // The reader's calls are inlined whatever else grows around them (~40 per summary: as calls, the rack's decodes
    // cost a fifth more; docs/scale.md, "One block per unit").
    [[gnu::always_inline]] uint64_t varint() {
        if (p_ < end_ && *p_ < 0x80) return *p_++;  // one byte (most tags, lengths and sources): the loop's first turn
        // Two bytes (sources from 128 to 16,383, lengths of summaries and windows): the loop's first two turns.
        if (end_ - p_ >= 2 && p_[1] < 0x80) {
            uint64_t out = (p_[0] & 0x7fu) | (static_cast<uint64_t>(p_[1]) << 7);
            p_ += 2;
            return out;
        }
        uint64_t out = 0;
        for (int i = 0; i < 10; ++i) {
            if (p_ >= end_) throw WireError("truncated varint");
            uint8_t b = *p_++;
            out |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
            if (!(b & 0x80)) return out;
        }
        throw WireError("varint longer than 10 bytes");
    }

    // A tag: field number and wire type. upb reads it as a varint of at most 10 bytes whose value must fit
    // 32 bits, and refuses field number 0.
    [[gnu::always_inline]] void tag(uint32_t& field, uint32_t& type) {
        uint64_t t = varint();
        if (t > 0xffffffffu) throw WireError("tag out of range");
        field = static_cast<uint32_t>(t >> 3);
        type = static_cast<uint32_t>(t & 7);
        if (field == 0) throw WireError("field number 0");
    }

    [[gnu::always_inline]] double fixed64_double() {
        if (left() < 8) throw WireError("truncated fixed64");
        double d;
        std::memcpy(&d, p_, 8);
        p_ += 8;
        return d;
    }

    void skip(size_t n) {
        if (left() < n) throw WireError("truncated field");
        p_ += n;
    }

    // A length-delimited field's payload.
    [[gnu::always_inline]] Reader sub() {
        uint64_t n = varint();
        if (n > 0x7fffffffu || n > left()) throw WireError("length-delimited field runs past the end");
        Reader out(p_, static_cast<size_t>(n));
        p_ += n;
        return out;
    }

    const uint8_t* data() const { return p_; }

    // Whether the next tag is the one whose one-byte (or two-byte) varint is `b` (`b0 b1`): then it is consumed, as
    // tag() would consume it; else nothing is. A decoder reading fields in the order an encoder writes them asks so.
    [[gnu::always_inline]] bool next_tag(uint8_t b) {
        if (p_ < end_ && *p_ == b) {
            ++p_;
            return true;
        }
        return false;
    }
    [[gnu::always_inline]] bool next_tag(uint8_t b0, uint8_t b1) {
        if (end_ - p_ >= 2 && p_[0] == b0 && p_[1] == b1) {
            p_ += 2;
            return true;
        }
        return false;
    }

    // Skips a field of unknown number (or known number with another wire type): what upb keeps as unknown.
    void skip_field(uint32_t field, uint32_t type, int depth = 0) {
        switch (type) {
            case VARINT: varint(); return;
            case FIXED64: skip(8); return;
            case LEN: sub(); return;
            case FIXED32: skip(4); return;
            case SGROUP: {
                if (depth >= 100) throw WireError("groups nested too deep");
                for (;;) {
                    uint32_t f, t;
                    tag(f, t);
                    if (t == EGROUP) {
                        if (f != field) throw WireError("end group does not match its start");
                        return;
                    }
                    skip_field(f, t, depth + 1);
                }
            }
            case EGROUP: throw WireError("end group without a start");
            default: throw WireError("invalid wire type");
        }
    }

  private:
    const uint8_t* p_;
    const uint8_t* end_;
};

class Writer {
  public:
    std::string out;

    void varint(uint64_t v) {
        while (v >= 0x80) {
            out.push_back(static_cast<char>((v & 0x7f) | 0x80));
            v >>= 7;
        }
        out.push_back(static_cast<char>(v));
    }
    void tag(uint32_t field, uint32_t type) { varint((static_cast<uint64_t>(field) << 3) | type); }
    void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }

    // proto3 implicit presence: a field equal to its default (all bits zero) is left out.
    void uint_field(uint32_t field, uint64_t v) {
        if (v) {
            tag(field, VARINT);
            varint(v);
        }
    }
    void double_field(uint32_t field, double v) {
        uint64_t bits;
        std::memcpy(&bits, &v, 8);
        if (bits) {
            tag(field, FIXED64);
            raw(&v, 8);
        }
    }
    void bytes_field(uint32_t field, const void* p, size_t n) {
        if (n) {
            tag(field, LEN);
            varint(n);
            raw(p, n);
        }
    }
    template <class Doubles>  // a vector of double, whatever its allocator
    void packed_doubles(uint32_t field, const Doubles& v) {
        if (!v.empty()) bytes_field(field, v.data(), v.size() * 8);
    }
    void packed_uints(uint32_t field, const std::vector<uint32_t>& v) {
        if (v.empty()) return;
        Writer body;
        for (uint32_t x : v) body.varint(x);
        bytes_field(field, body.out.data(), body.out.size());
    }
};

}  // namespace treemetry
