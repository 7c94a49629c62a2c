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

// IsFoldScript reports whether sha names one of the scripts that run a
// completion together with an asynq acknowledgement.
func IsFoldScript(sha string) bool {
	for _, s := range foldScripts {
		if s.Hash() == sha {
			return true
		}
	}
	return false
}
