// The binomial tree over ranks renumbered relative to the root (v = (rank - root) mod n): v's
// parent clears v's lowest set bit; v's children add each lower bit that stays below n. Shared by
// the binomial broadcast and reduce, which must agree on the shape with every other rank.
#pragma once

#include <vector>

namespace braid::algorithms {

struct BinomialTree {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // largest subtree first (broadcast order; reduce reverses it)
};

// The lowest set bit of relative rank v: the size of the subtree v heads before it is clipped at
// `size`, and the distance to its parent. For the root (v == 0), the smallest power of two >=
// `size`, so that every relative rank is below it. The binomial gather and scatter move whole
// subtrees' blocks with it.
inline int BinomialLowBit(int v, int size) {
  if (v != 0) return v & -v;
  int bit = 1;
  while (bit < size) bit <<= 1;
  return bit;
}

inline BinomialTree MakeBinomialTree(int rank, int size, int root) {
  const int v = (rank - root + size) % size;
  int low_bit = 1;
  while (low_bit < size && (v & low_bit) == 0) low_bit <<= 1;
  BinomialTree tree;
  tree.parent = v == 0 ? -1 : (v - low_bit + root) % size;
  for (int bit = low_bit >> 1; bit > 0; bit >>= 1) {
    if (v + bit < size) tree.children.push_back((v + bit + root) % size);
  }
  return tree;
}

}  // namespace braid::algorithms
