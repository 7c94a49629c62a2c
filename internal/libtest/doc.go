// Package libtest holds the tests of the library (module dedup) that need
// what its module must not require: miniredis, on which the daemon's
// embedded default runs the library's scripts, and goleak. Only tests.
package libtest
