package impair

// bpf2go compiles the source by relative path and strips DWARF, so the
// committed object holds no absolute path and is byte-for-byte reproducible
// from a clean clone in any directory (checked by regenerating elsewhere).
//go:generate go tool bpf2go -tags linux -target bpfel -type stat -cflags "-O2 -g -Wall -I/usr/include/x86_64-linux-gnu" impair impair.c
