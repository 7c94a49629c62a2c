package dedup

// FoldAsynqVersion is the asynq release ackfold.go was verified against.
const FoldAsynqVersion = foldAsynqVersion

// SetAsynqVersion makes FoldCompletes see v as the linked asynq version
// (test binaries carry no module list). Call it from serial tests only.
func SetAsynqVersion(v string) (restore func()) {
	old := asynqVersion
	asynqVersion = func() string { return v }
	return func() { asynqVersion = old }
}
