package dedup

// GuardAsynqVersion is the asynq release enqueue.go's guard was verified against.
const GuardAsynqVersion = guardAsynqVersion
