// stdmap_ring.cc -- the seed design, as the baseline for bench/ring.sh: a
// std::map from 32-bit point to member name, points at std::hash of
// "name#i", lookup by upper_bound with wrap, the name returned by value.
// SPDX-License-Identifier: BSD-2-Clause
//
// usage: stdmap_ring MEMBERS POINTS KEYS ROUNDS
// Keys are the same splitmix64 stream (seed 42) `chash bench` uses; the
// 32-bit ring takes the top 32 bits of each, as chash's 32-bit continua do.
// Prints key=value lines: ns_per_lookup (independent lookups),
// ns_per_lookup_dependent (each waits for the last), build_ms, heap_bytes,
// bytes_per_point, points.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <malloc.h>
#include <map>
#include <string>
#include <vector>

static uint64_t
splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double
now_s()
{
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double>(clock::now().time_since_epoch())
        .count();
}

static double
median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void
build(std::map<uint32_t, std::string> &ring, size_t members, size_t points)
{
    std::hash<std::string> h;
    for (size_t m = 0; m < members; m++) {
        std::string name = "node-" + std::to_string(m);
        for (size_t i = 0; i < points; i++)
            ring[(uint32_t)h(name + "#" + std::to_string(i))] = name;
    }
}

// The seed's lookup: first point strictly after the key, wrapping.
static std::string
lookup(const std::map<uint32_t, std::string> &ring, uint32_t key)
{
    auto it = ring.upper_bound(key);
    if (it == ring.end())
        it = ring.begin();
    return it->second;
}

int
main(int argc, char **argv)
{
    if (argc != 5) {
        std::fprintf(stderr, "usage: stdmap_ring MEMBERS POINTS KEYS ROUNDS\n");
        return 2;
    }
    size_t members = std::strtoul(argv[1], nullptr, 10);
    size_t points = std::strtoul(argv[2], nullptr, 10);
    size_t keys = std::strtoul(argv[3], nullptr, 10);
    int rounds = std::atoi(argv[4]);
    if (members == 0 || points == 0 || keys == 0 || rounds <= 0) {
        std::fprintf(stderr, "stdmap_ring: arguments must be positive\n");
        return 2;
    }

    std::vector<uint32_t> k(keys);
    uint64_t st = 42;
    for (size_t i = 0; i < keys; i++)
        k[i] = (uint32_t)(splitmix64(&st) >> 32);

    std::vector<double> build_ms, ns;
    std::map<uint32_t, std::string> ring;
    size_t heap = 0;
    for (int r = 0; r < rounds; r++) {
        ring.clear();
        size_t before = mallinfo2().uordblks;
        double t0 = now_s();
        build(ring, members, points);
        build_ms.push_back((now_s() - t0) * 1e3);
        heap = mallinfo2().uordblks - before;
    }
    size_t sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (size_t i = 0; i < keys; i++)
            sink += lookup(ring, k[i]).size();
        ns.push_back((now_s() - t0) * 1e9 / (double)keys);
    }
    // Dependent lookups, as `chash bench --latency`: each key is perturbed
    // by the previous answer so lookups cannot overlap.
    std::vector<double> dep;
    for (int r = 0; r < rounds; r++) {
        size_t prev = 0;
        double t0 = now_s();
        for (size_t i = 0; i < keys; i++)
            prev = lookup(ring, k[i] ^ (uint32_t)(prev & 1)).size();
        dep.push_back((now_s() - t0) * 1e9 / (double)keys);
        sink += prev;
    }
    std::printf("points=%zu\nns_per_lookup=%.2f\nns_per_lookup_dependent=%.2f\n"
                "build_ms=%.3f\nheap_bytes=%zu\nbytes_per_point=%.2f\n"
                "sink=%zu\n",
                ring.size(), median(ns), median(dep), median(build_ms), heap,
                (double)heap / (double)ring.size(), sink);
    return 0;
}
