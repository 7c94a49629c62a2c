package dedup

import (
	"embed"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/history"
	"github.com/onceq/onceq/dedup/internal/mark"
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
	// Claims and ends of runs append to the key's history (internal/history).
	// Claims and completions read and write compact marks (internal/mark).
	claimScript     = redis.NewScript(history.Lua + mark.Read + luaSource("claim.lua"))
	purgeScript     = mustScript("purge.lua")
	extendScript    = mustScript("extend.lua")
	finishScript    = redis.NewScript(history.Lua + mark.Write + "local KO, AO = 0, 0\n" + luaSource("finish.lua"))
	reserveScript   = mustScript("reserve.lua")
	statusScript    = redis.NewScript(mark.Read + luaSource("status.lua"))
	forgetScript    = redis.NewScript(mark.Del + luaSource("forget.lua"))
	unreserveScript = mustScript("unreserve.lua")
)
