//go:build shardlong

package shard

func init() { failoverSeeds = 60 }
