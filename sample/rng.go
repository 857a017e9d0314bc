package sample

import "math/bits"

// rng is xoshiro256** 1.0 (Blackman and Vigna, 2018), seeded by expanding one
// 64-bit seed through splitmix64, as its authors recommend.
//
// Why not math/rand: its generators' output streams are not promised to stay
// the same across Go versions, and a seeded request must give the same tokens
// on every platform and every release. xoshiro256** is small (four words of
// state), fast, passes BigCrush, and is fully specified by its reference code,
// so a seed here names one exact stream forever.
type rng struct {
	s [4]uint64
}

// newRNG seeds the four state words with four successive splitmix64 outputs.
// splitmix64 never yields four zero words, so the state is always valid.
func newRNG(seed uint64) *rng {
	r := &rng{}
	for i := range r.s {
		r.s[i], seed = splitmix64(seed)
	}
	return r
}

// splitmix64 returns the next output and the advanced state.
func splitmix64(state uint64) (out, next uint64) {
	next = state + 0x9e3779b97f4a7c15
	z := next
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31), next
}

// Uint64 returns the next 64 random bits.
func (r *rng) Uint64() uint64 {
	s := &r.s
	result := bits.RotateLeft64(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft64(s[3], 45)
	return result
}

// Float64 returns a uniform value in [0, 1) with 53 random bits: the top 53
// bits of one output (the low bits of xoshiro's ** scrambler are the weakest).
func (r *rng) Float64() float64 {
	return float64(r.Uint64()>>11) * 0x1p-53
}
