// Package docs holds the tests that keep docs/architecture.md and the
// README in step with the source tree: the package table lists exactly the
// packages there are, and every file the request flow names exists. It has
// no code of its own; the tests are the point.
package docs
