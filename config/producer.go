package config

// Producer is the configuration of the producer CLI (enqueue, status).
type Producer struct {
	Redis
	Log
	Dedup
	Postgres
}

func (p Producer) validate() error {
	for _, v := range []func() error{p.Redis.validate, p.Log.validate, p.Dedup.validate, p.Postgres.validate} {
		if err := v(); err != nil {
			return err
		}
	}
	return nil
}
