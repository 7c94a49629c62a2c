// Package docstest runs every shell example of README.md and docs/, in
// the order a reader meets them, and checks each prints what its page
// says. Only tests.
package docstest
