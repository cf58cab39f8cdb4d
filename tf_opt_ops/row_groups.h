// Groups the positions of a sparse gradient by the variable row they name, so
// duplicate indices can be summed before the update (the kernels, not the
// callers, deduplicate: Keras 3 and MirroredStrategy hand over raw
// duplicates). No TensorFlow includes; temporaries are O(len(indices)).
#ifndef TF_OPT_OPS_ROW_GROUPS_H_
#define TF_OPT_OPS_ROW_GROUPS_H_

#include <cstdint>
#include <vector>

namespace tf_opt_ops {

class RowGroups {
 public:
  // Validates every index against [0, num_rows) and groups equal ones.
  // Returns the position of the first bad index, or -1 when all are valid.
  // Nothing else is built when an index is bad.
  template <typename Tindex>
  int64_t Build(const Tindex* indices, int64_t n, int64_t num_rows);

  int64_t num_unique() const { return static_cast<int64_t>(rows_.size()); }
  bool has_duplicates() const { return num_unique() != n_; }
  // Variable row of unique group u (groups in first-appearance order).
  const int64_t* rows() const { return rows_.data(); }
  // Positions of group u: first(u), then next(p) until -1, in input order.
  int64_t first(int64_t u) const { return first_[u]; }
  int64_t next(int64_t p) const { return next_[p]; }

 private:
  int64_t n_ = 0;
  std::vector<int64_t> rows_;
  std::vector<int64_t> first_;
  std::vector<int64_t> next_;
};

template <typename Tindex>
int64_t RowGroups::Build(const Tindex* indices, int64_t n, int64_t num_rows) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(indices[i]);
    if (row < 0 || row >= num_rows) return i;
  }
  n_ = n;
  rows_.clear();
  rows_.reserve(n);
  first_.clear();
  first_.reserve(n);
  next_.assign(n, -1);
  // Open addressing, capacity a power of two >= 2n: at most half full.
  int64_t capacity = 16;
  while (capacity < 2 * n) capacity <<= 1;
  const uint64_t mask = static_cast<uint64_t>(capacity) - 1;
  std::vector<int64_t> slot_row(capacity, -1);
  std::vector<int64_t> slot_group(capacity);
  std::vector<int64_t> last;  // last position of each group, to append
  last.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(indices[i]);
    uint64_t h = (static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> 17;
    while (true) {
      const uint64_t s = h & mask;
      if (slot_row[s] == row) {
        const int64_t u = slot_group[s];
        next_[last[u]] = i;
        last[u] = i;
        break;
      }
      if (slot_row[s] < 0) {
        slot_row[s] = row;
        slot_group[s] = num_unique();
        rows_.push_back(row);
        first_.push_back(i);
        last.push_back(i);
        break;
      }
      ++h;
    }
  }
  return -1;
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_ROW_GROUPS_H_
