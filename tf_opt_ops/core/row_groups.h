// Groups the positions of a sparse gradient by the variable row they name, so
// duplicate indices can be summed before the update (the kernels, not the
// callers, deduplicate: Keras 3 and MirroredStrategy hand over raw
// duplicates). No TensorFlow includes; temporaries are O(len(indices)).
//
// Large batches are grouped in parallel, with no serial pass over the batch:
// the indices are split into partitions by a hash of the row (a row's
// duplicates all land in one partition), each chunk of the batch counts and
// then scatters its positions to the partitions, and each partition is
// grouped on its own. Only prefix sums over chunks x partitions (a constant)
// run serially. Why: see docs/design.md, "Choices".
#ifndef TF_OPT_OPS_CORE_ROW_GROUPS_H_
#define TF_OPT_OPS_CORE_ROW_GROUPS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tf_opt_ops {

class RowGroups {
 public:
  // Validates every index against [0, num_rows) and groups equal ones.
  // Returns the position of the first bad index, or -1 when all are valid.
  // Nothing else is built when an index is bad. `parallel_for(count, fn)`
  // runs fn(begin, end) over [0, count), on any threads, and returns when
  // all have run; each item is kChunk indices' worth of work.
  template <typename Tindex, typename ParallelFor>
  int64_t Build(const Tindex* indices, int64_t n, int64_t num_rows, ParallelFor&& parallel_for);

  int64_t num_unique() const { return static_cast<int64_t>(rows_.size()); }
  bool has_duplicates() const { return num_unique() != n_; }
  // Variable row of unique group u (groups in no particular order, except
  // that without duplicates group u is position u: the kernels then read
  // gradient row u of the input itself).
  const int64_t* rows() const { return rows_.data(); }
  // Positions of group u: first(u), then next(p) until -1, in input order.
  int64_t first(int64_t u) const { return first_[u]; }
  int64_t next(int64_t p) const { return next_[p]; }

  // Indices per work item of Build's parallel loops; batches up to this run
  // in one partition, on the calling thread.
  static constexpr int64_t kChunk = 16384;

 private:
  static constexpr int kPartitionBits = 6;

  static uint64_t Hash(int64_t row) { return static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull; }

  // Groups the positions `pos[0..count)` (ascending; 0..count-1 when `pos`
  // is null) of one partition:
  // writes the partition's rows and first positions to rows/first (from
  // index 0) and links next_; returns the number of groups.
  template <typename Tindex>
  int64_t GroupPartition(const Tindex* indices, const int64_t* pos, int64_t count, int64_t* rows,
                         int64_t* first);

  int64_t n_ = 0;
  std::vector<int64_t> rows_;
  std::vector<int64_t> first_;
  std::vector<int64_t> next_;
};

template <typename Tindex>
int64_t RowGroups::GroupPartition(const Tindex* indices, const int64_t* pos, int64_t count,
                                  int64_t* rows, int64_t* first) {
  // Open addressing, capacity a power of two >= 2 * count: at most half full.
  int64_t capacity = 16;
  while (capacity < 2 * count) capacity <<= 1;
  const uint64_t mask = static_cast<uint64_t>(capacity) - 1;
  struct Slot {
    int64_t row;
    int64_t group;
  };
  std::vector<Slot> slots(capacity, Slot{-1, 0});
  std::vector<int64_t> last;  // last position of each group, to append
  last.reserve(count);
  int64_t num_groups = 0;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = pos == nullptr ? k : pos[k];
    const int64_t row = static_cast<int64_t>(indices[i]);
    // Low bits of the hash's upper half: the partition took the top bits.
    for (uint64_t h = Hash(row) >> 17;; ++h) {
      Slot& slot = slots[h & mask];
      if (slot.row == row) {
        next_[last[slot.group]] = i;
        last[slot.group] = i;
        break;
      }
      if (slot.row < 0) {
        slot = Slot{row, num_groups};
        rows[num_groups] = row;
        first[num_groups] = i;
        last.push_back(i);
        ++num_groups;
        break;
      }
    }
  }
  return num_groups;
}

template <typename Tindex, typename ParallelFor>
int64_t RowGroups::Build(const Tindex* indices, int64_t n, int64_t num_rows,
                         ParallelFor&& parallel_for) {
  const int64_t num_chunks = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
  const auto chunk_begin = [n, num_chunks](int64_t c) { return n * c / num_chunks; };

  const int partition_bits = num_chunks == 1 ? 0 : kPartitionBits;
  const int64_t num_partitions = int64_t{1} << partition_bits;
  const auto partition = [partition_bits](int64_t row) -> int64_t {
    return partition_bits == 0 ? 0 : Hash(row) >> (64 - partition_bits);
  };
  // One pass per chunk validates and counts: offsets[c * P + q] is first the
  // number of chunk c's positions in partition q, then where they start in
  // `order` (positions grouped by partition, ascending within each).
  std::vector<int64_t> first_bad(num_chunks, -1);
  std::vector<int64_t> offsets(num_chunks * num_partitions, 0);
  parallel_for(num_chunks, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      int64_t* count = offsets.data() + c * num_partitions;
      for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
        const int64_t row = static_cast<int64_t>(indices[i]);
        if (row < 0 || row >= num_rows) {
          first_bad[c] = i;
          break;
        }
        ++count[partition(row)];
      }
    }
  });
  for (const int64_t bad : first_bad) {
    if (bad >= 0) return bad;  // chunks in order: the first bad one
  }

  n_ = n;
  next_.assign(n, -1);
  int64_t total = 0;
  for (int64_t q = 0; q < num_partitions; ++q) {
    for (int64_t c = 0; c < num_chunks; ++c) {
      const int64_t count = offsets[c * num_partitions + q];
      offsets[c * num_partitions + q] = total;
      total += count;
    }
  }
  if (num_partitions == 1) {  // one chunk: grouped in place, on this thread
    rows_.resize(n);
    first_.resize(n);
    const int64_t num_groups = GroupPartition(indices, nullptr, n, rows_.data(), first_.data());
    rows_.resize(num_groups);
    first_.resize(num_groups);
    return -1;
  }
  std::vector<int64_t> order(n);
  parallel_for(num_chunks, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      std::vector<int64_t> at(offsets.begin() + c * num_partitions,
                              offsets.begin() + (c + 1) * num_partitions);
      for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
        order[at[partition(static_cast<int64_t>(indices[i]))]++] = i;
      }
    }
  });
  // Partition q's positions are order[part_begin[q], part_begin[q + 1]).
  std::vector<int64_t> part_begin(num_partitions + 1, n);
  for (int64_t q = 0; q < num_partitions; ++q) part_begin[q] = offsets[q];  // chunk 0's start

  // Each partition's groups land at its own range of rows/first, then are
  // packed together.
  std::vector<int64_t> part_rows(n);
  std::vector<int64_t> part_first(n);
  std::vector<int64_t> part_groups(num_partitions);
  parallel_for(num_partitions, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const int64_t b = part_begin[q];
      part_groups[q] = GroupPartition(indices, order.data() + b, part_begin[q + 1] - b,
                                      part_rows.data() + b, part_first.data() + b);
    }
  });
  std::vector<int64_t> group_begin(num_partitions + 1, 0);
  for (int64_t q = 0; q < num_partitions; ++q) group_begin[q + 1] = group_begin[q] + part_groups[q];
  rows_.resize(group_begin[num_partitions]);
  first_.resize(group_begin[num_partitions]);
  if (group_begin[num_partitions] == n) {  // no duplicates: group u is position u
    parallel_for(num_chunks, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        for (int64_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
          rows_[i] = static_cast<int64_t>(indices[i]);
          first_[i] = i;
        }
      }
    });
    return -1;
  }
  parallel_for(num_partitions, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      std::copy_n(part_rows.begin() + part_begin[q], part_groups[q],
                  rows_.begin() + group_begin[q]);
      std::copy_n(part_first.begin() + part_begin[q], part_groups[q],
                  first_.begin() + group_begin[q]);
    }
  });
  return -1;
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_ROW_GROUPS_H_
