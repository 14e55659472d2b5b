"""The asynchronous request queue inside an app (a gateway, or a single `tandem serve`): the
service that runs queued jobs through the app's own backend, its pressure policy and metrics, and
the routes of the batch APIs over it. The durable store, dispatcher and notifier are tandem.asyncq."""
