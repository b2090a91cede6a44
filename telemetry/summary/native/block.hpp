// One heap block for the lists of the cores a unit's read makes (issue 29; docs/scale.md, "One block per unit"):
// a rack's child cores were four heap blocks each (top, bottom, the digest's means and weights: 76,800 a step at
// 64 children x 300 metrics), made on the loop by read_unit and freed one by one on the outbox thread once the
// parent had acked; malloc and free were ~13 % of the rack's instructions. A unit's decodes instead carve their
// lists from a few chunks (UnitBlock), which go back to the heap together when the last list cut from them is freed.
//
// The rules that keep it safe without any care from the code that holds cores:
// - Every list cut from a block holds the block (its allocator, BlockAlloc, holds a counted BlockRef), so a block lives
//   exactly as long as the lists in it, wherever they are moved (a window's pending entries, a Batch, a Python
//   Summary) and on whatever thread they are dropped.
// - A block is carved only while its unit is read, on that thread; then it is sealed, and whatever a list cut from
//   it allocates after (a core grown by a merge into it) comes from the heap: nothing in a sealed block changes but
//   its reference count, so lists of one block may be grown and freed on different threads.
// - A copy of a list (a core's copy) is the heap's (select_on_container_copy_construction), so copies pin no block;
//   a move takes the list's storage and its block along (propagate_on_container_move_assignment).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace treemetry {

class UnitBlock {
public:
    UnitBlock() = default;
    UnitBlock(const UnitBlock&) = delete;
    UnitBlock& operator=(const UnitBlock&) = delete;
    ~UnitBlock() {
        for (const Chunk& c : chunks_) ::operator delete(c.base);
    }

    // Room for `bytes` aligned to `align` (at most alignof(max_align_t)): carved from the last chunk (a new chunk
    // when it is full) until the block is sealed, from the heap after, or when it is larger than a chunk.
    // Out of line (core.cpp), as give: every list operation of every core inlines its allocator's calls.
    void* take(size_t bytes, size_t align);

    // Room given back: nothing, when it lies in a chunk (the chunks go together, with the block).
    void give(void* p) noexcept;

    // No more carving (read_unit's end): the chunks are left unchanged from here on.
    void seal() noexcept { sealed_.store(true, std::memory_order_release); }

    // The last chunks first: they are the largest (up to 64 KiB, where the first is 4), so most lists lie in them.
    bool holds(const void* p) const noexcept {
        auto* c = static_cast<const char*>(p);
        for (auto chunk = chunks_.rbegin(); chunk != chunks_.rend(); ++chunk)
            if (c >= chunk->base && c < chunk->base + chunk->size) return true;
        return false;
    }
    size_t chunks() const noexcept { return chunks_.size(); }

    // Its count of references (BlockRef's): the block goes when the last goes, on whichever thread.
    void hold() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
    void release() noexcept {
        if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
    }

    // Chunks of 4 KiB doubling up to 64 KiB (below malloc's mmap threshold): a rack's unit of 300 child windows
    // (~112 KiB of lists) takes 5 or 6, and no unit holds more than 64 KiB it does not use.
    static constexpr size_t kFirstChunk = size_t(1) << 12, kMaxChunk = size_t(1) << 16;

private:
    struct Chunk {
        char* base;
        size_t size;
    };
    std::vector<Chunk> chunks_;
    size_t used_ = 0;  // in the last chunk
    std::atomic<bool> sealed_{false};
    std::atomic<size_t> refs_{1};  // its maker's (BlockRef::make)
};

// A counted reference to a block, as a shared_ptr<UnitBlock> (copies count, a move takes the reference, the last
// one frees the block) without shared_ptr's out-of-line release: every list of a read core held and dropped one (a
// rack's step dropped 120,000, at ~18 instructions a call; docs/scale.md, session 43).
class BlockRef {
public:
    BlockRef() noexcept = default;
    static BlockRef make() { return BlockRef(new UnitBlock()); }
    BlockRef(const BlockRef& other) noexcept : b_(other.b_) {
        if (b_) b_->hold();
    }
    BlockRef(BlockRef&& other) noexcept : b_(other.b_) { other.b_ = nullptr; }
    BlockRef& operator=(BlockRef other) noexcept {
        std::swap(b_, other.b_);
        return *this;
    }
    ~BlockRef() {
        if (b_) b_->release();
    }
    UnitBlock* operator->() const noexcept { return b_; }
    explicit operator bool() const noexcept { return b_ != nullptr; }
    bool operator==(const BlockRef& other) const noexcept { return b_ == other.b_; }
    bool operator!=(const BlockRef& other) const noexcept { return b_ != other.b_; }

private:
    explicit BlockRef(UnitBlock* b) noexcept : b_(b) {}
    UnitBlock* b_ = nullptr;
};

// A list's allocator: its block's, or the heap's when it has none.
template <class T>
struct BlockAlloc {
    static_assert(alignof(T) <= alignof(std::max_align_t), "a block carves at most max_align_t alignment");
    using value_type = T;
    using propagate_on_container_copy_assignment = std::false_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;

    BlockRef block;

    BlockAlloc() noexcept = default;
    explicit BlockAlloc(BlockRef b) noexcept : block(std::move(b)) {}
    template <class U>
    BlockAlloc(const BlockAlloc<U>& other) noexcept : block(other.block) {}

    T* allocate(size_t n) {
        if (!block) return std::allocator<T>().allocate(n);
        if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(block->take(n * sizeof(T), alignof(T)));
    }
    void deallocate(T* p, size_t n) noexcept {
        if (!block) return std::allocator<T>().deallocate(p, n);
        block->give(p);
    }
    BlockAlloc select_on_container_copy_construction() const noexcept { return BlockAlloc(); }

    template <class U>
    bool operator==(const BlockAlloc<U>& other) const noexcept { return block == other.block; }
    template <class U>
    bool operator!=(const BlockAlloc<U>& other) const noexcept { return block != other.block; }
};

using Doubles = std::vector<double, BlockAlloc<double>>;

}  // namespace treemetry
