package config

import "go.uber.org/fx"

// Module provides the Config read from the environment.
var Module = fx.Module("config", fx.Provide(FromEnv))
