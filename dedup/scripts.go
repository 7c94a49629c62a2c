package dedup

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// luaSource is lua/<name>.
func luaSource(name string) string {
	src, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(src)
}

func mustScript(name string) *redis.Script { return redis.NewScript(luaSource(name)) }

var (
	claimScript     = mustScript("claim.lua")
	purgeScript     = mustScript("purge.lua")
	extendScript    = mustScript("extend.lua")
	finishScript    = mustScript("finish.lua")
	reserveScript   = mustScript("reserve.lua")
	unreserveScript = mustScript("unreserve.lua")
)
